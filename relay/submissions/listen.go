package submissions

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/genropy/postino/internal/pglisten"
)

// listen wakes the reader at each NOTIFY of the table's trigger, and each
// time LISTEN takes effect on a new connection (what was committed before
// woke nobody), until ctx ends; while no connection listens, the reader
// polls.
func (r *Reader) listen(ctx context.Context) {
	l := pglisten.Listener{
		Connect:  func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, r.cfg.DSN) },
		Channels: []string{r.cfg.Table},
		Notify:   func(*pgconn.Notification) { r.Wake() },
		CaughtUp: r.Wake,
		Log:      r.log,
	}
	l.Run(ctx)
}
