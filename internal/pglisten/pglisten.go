// Package pglisten holds a PostgreSQL LISTEN open for as long as a relay
// runs, which the outbox store and the submissions reader both need: a
// notification wakes a worker at once instead of at its next poll.
package pglisten

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/genropy/postino/internal/backoff"
)

// Listener listens on Channels over connections Connect makes.
type Listener struct {
	Connect  func(ctx context.Context) (*pgx.Conn, error)
	Channels []string
	// Notify is called with each notification.
	Notify func(n *pgconn.Notification)
	// CaughtUp is called each time LISTEN has taken effect on a new
	// connection: what was committed before (while no connection
	// listened, or before the first) woke nobody, so every worker should
	// look.
	CaughtUp func()
	Log      *slog.Logger
}

// Run listens until ctx ends. A connection that fails is replaced, on the
// schedule of an outage (backoff.Outage), which starts again from the first
// wait once a connection has listened; meanwhile the workers poll: a
// notification only shortens their wait.
//
// The log says when notifications are lost and when they are back, not at
// every try in between: a server down for a minute is one warning.
func (l *Listener) Run(ctx context.Context) {
	var outages backoff.Outages
	lost := false
	back := func() {
		if lost {
			l.Log.Info("PostgreSQL notifications are back")
			lost = false
		}
	}
	for ctx.Err() == nil {
		listened, err := l.listen(ctx, back)
		if ctx.Err() != nil {
			return
		}
		if listened {
			outages.Recovered()
		}
		wait := outages.Failed()
		if lost {
			l.Log.Debug("PostgreSQL LISTEN failed again", "error", err, "retry_in", wait)
		} else {
			l.Log.Warn("PostgreSQL notifications lost; the workers poll until LISTEN is back", "error", err)
			lost = true
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// listen holds one connection until it fails or ctx ends, calling
// listening once LISTEN has taken effect on it; listened says whether it
// did.
func (l *Listener) listen(ctx context.Context, listening func()) (listened bool, err error) {
	conn, err := l.Connect(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, c := range l.Channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{c}.Sanitize()); err != nil {
			return false, err
		}
	}
	listening()
	l.CaughtUp()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		l.Notify(n)
	}
}
