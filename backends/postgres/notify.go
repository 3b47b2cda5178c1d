package postgres

import (
	"context"
	"log/slog"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/genropy/postino/internal/pglisten"
)

// The channels a store NOTIFY's when a transaction makes work due, which
// Listen passes on: a relay sharing the database wakes its worker at once
// instead of at its next poll.
const (
	// ChannelAccepted: a message returned to ACCEPTED (a lease ran out, an
	// operator's retry). Not a new one: its own relay prepares it.
	ChannelAccepted = "postino_accepted"
	// ChannelReady: a message became READY and due now.
	ChannelReady = "postino_ready"
	// ChannelEvents: an event became pending and due now.
	ChannelEvents = "postino_events"
)

var channels = []string{ChannelAccepted, ChannelReady, ChannelEvents}

// queueNotify notifies the channels of wake in b, with the sender's name
// as their payload: PostgreSQL delivers the notifications when the
// transaction commits, and not at all when it rolls back.
func queueNotify(b *pgx.Batch, sender string, wake map[string]bool) {
	if len(wake) > 0 {
		b.Queue("SELECT pg_notify(c, $2) FROM unnest($1::text[]) c", slices.Sorted(maps.Keys(wake)), sender)
	}
}

// ListenerName is the application_name of Listen's connection, which
// pg_stat_activity shows.
const ListenerName = "postino-listen"

// Listen calls wake with the channel of each notification another store on
// this database sends (ChannelAccepted, ChannelReady, ChannelEvents), until
// ctx ends, on a connection of its own outside the pool. Each time LISTEN
// takes effect on a new connection, at the start and after one was lost,
// it calls wake for every channel: notifications sent while none listened
// were missed. Polling stays the fallback.
func (s *Store) Listen(ctx context.Context, log *slog.Logger, wake func(channel string)) {
	l := pglisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			cfg := s.pool.Config().ConnConfig.Copy()
			cfg.RuntimeParams["application_name"] = ListenerName
			return pgx.ConnectConfig(ctx, cfg)
		},
		Channels: channels,
		Notify: func(n *pgconn.Notification) {
			// The store's own work woke its relay's workers already.
			if n.Payload != s.sender {
				wake(n.Channel)
			}
		},
		CaughtUp: func() {
			for _, c := range channels {
				wake(c)
			}
		},
		Log: log,
	}
	l.Run(ctx)
}
