package postgres

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// The channels a store NOTIFY's when a transaction makes work due, which
// Listen passes on: a relay sharing the database wakes its worker at once
// instead of at its next poll.
const (
	// ChannelAccepted: a message was created or returned to ACCEPTED.
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

// listenRetry is the wait before connecting again after the listening
// connection was lost.
const listenRetry = time.Second

// Listen calls wake with the channel of each notification another store on
// this database sends (ChannelAccepted, ChannelReady, ChannelEvents), until ctx
// ends. It listens on a connection of its own, outside the pool; when the
// connection is lost it connects again and calls wake for every channel,
// since notifications sent meanwhile were missed, and says so in log.
// Polling stays the fallback: a notification only shortens a worker's
// wait.
func (s *Store) Listen(ctx context.Context, log *slog.Logger, wake func(channel string)) {
	for ctx.Err() == nil {
		err := s.listen(ctx, wake)
		if ctx.Err() != nil {
			return
		}
		log.Warn("PostgreSQL notifications lost; listening again", "error", err, "retry", listenRetry)
		select {
		case <-ctx.Done():
			return
		case <-time.After(listenRetry):
		}
		for _, c := range channels {
			wake(c)
		}
	}
}

// listen holds one listening connection until it fails or ctx ends.
func (s *Store) listen(ctx context.Context, wake func(channel string)) error {
	cfg := s.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = ListenerName
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, c := range channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{c}.Sanitize()); err != nil {
			return err
		}
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		// The store's own work woke its relay's workers already.
		if n.Payload != s.sender {
			wake(n.Channel)
		}
	}
}
