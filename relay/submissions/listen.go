package submissions

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// listen wakes the reader at each NOTIFY of the table's trigger, on a
// connection of its own, until ctx ends; when the connection fails it
// connects again, and meanwhile the reader polls.
func (r *Reader) listen(ctx context.Context) {
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		listened, err := r.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if listened {
			backoff = 0 // a connection that worked, then failed: try again soon
		}
		backoff = min(max(2*backoff, 100*time.Millisecond), 10*time.Second)
		r.log.Warn("submissions: LISTEN failed; polling every "+r.cfg.Poll.String()+" until it is back", "error", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
	}
}

// listenOnce listens on one connection until it fails or ctx ends;
// listened says whether LISTEN took effect.
func (r *Reader) listenOnce(ctx context.Context) (listened bool, err error) {
	conn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{r.cfg.Table}.Sanitize()); err != nil {
		return false, err
	}
	// What was committed before LISTEN took effect woke nobody.
	r.Wake()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return true, err
		}
		r.Wake()
	}
}
