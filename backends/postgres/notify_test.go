package postgres_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/postgres"
)

// TestNotify: two stores on one database, as two relays share it; what one
// makes due wakes a listener of the other, on the channel of that work.
func TestNotify(t *testing.T) {
	ctx := context.Background()
	dsn := freshDatabase(t)
	stores := make([]*postgres.Store, 2)
	for i := range stores {
		s, err := postgres.Open(ctx, dsn, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	writer, listener := stores[0], stores[1]
	woken := make(chan string, 64)
	lctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		listener.Listen(lctx, slog.New(slog.DiscardHandler), func(ch string) { woken <- ch })
	}()
	t.Cleanup(func() { stop(); <-done })

	// Listening has begun once every channel was woken (Listen's catch-up);
	// from then on a wake is a notification.
	caughtUp(t, woken)
	const deadline = 30 * time.Second
	expect := func(what, want string, do func(i int)) {
		t.Helper()
		timeout := time.After(deadline)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			do(i)
			select {
			case ch := <-woken:
				if ch == want {
					return
				}
			case <-timeout:
				t.Fatalf("%s: no %s notification within %s", what, want, deadline)
			case <-tick.C:
			}
		}
	}
	// A new message wakes no one (its relay prepares it): the first
	// notification after its create is that of the event added next,
	// since a listener gets them in commit order.
	if err := writer.Create(ctx, &backends.Message{ID: "n-1", Priority: 2, EmlPath: "x.eml"}); err != nil {
		t.Fatal(err)
	}
	if err := writer.AddEvent(ctx, &backends.Event{ID: backends.NewEventID(), MessageID: "n-1", Outcome: "DELAYED"}); err != nil {
		t.Fatal(err)
	}
	select {
	case ch := <-woken:
		if ch != postgres.ChannelEvents {
			t.Errorf("first notification after a create: %s, want %s", ch, postgres.ChannelEvents)
		}
	case <-time.After(deadline):
		t.Fatalf("no notification of the event within %s", deadline)
	}
	now := time.Now().UTC()
	claimed, err := writer.Claim(ctx, backends.Claim{From: backends.StatusAccepted, To: backends.StatusIntaking, Now: now.Add(time.Second),
		LeaseUntil: now.Add(time.Minute), Limit: 1})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v, %v", claimed, err)
	}
	expect("lease returned to ACCEPTED", postgres.ChannelAccepted, func(i int) {
		if i == 0 {
			if err := writer.Transition(ctx, backends.Transition{ID: "n-1", From: backends.StatusIntaking, To: backends.StatusAccepted}); err != nil {
				t.Fatal(err)
			}
		}
	})
	claimed, err = writer.Claim(ctx, backends.Claim{From: backends.StatusAccepted, To: backends.StatusIntaking, Now: now.Add(time.Second),
		LeaseUntil: now.Add(time.Minute), Limit: 1})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim again: %v, %v", claimed, err)
	}
	expect("transition to READY", postgres.ChannelReady, func(i int) {
		if i == 0 {
			if err := writer.Transition(ctx, backends.Transition{ID: claimed[0].ID, From: backends.StatusIntaking, To: backends.StatusReady}); err != nil {
				t.Fatal(err)
			}
		}
	})
	drain(woken)
	expect("event", postgres.ChannelEvents, func(i int) {
		if i == 0 {
			if err := writer.AddEvent(ctx, &backends.Event{ID: backends.NewEventID(), MessageID: claimed[0].ID, Outcome: "DELAYED"}); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// caughtUp waits until woken has said every channel, as Listen does once
// LISTEN has taken effect, and drops what else it holds.
func caughtUp(t *testing.T, woken chan string) {
	t.Helper()
	seen := map[string]bool{}
	timeout := time.After(30 * time.Second)
	for len(seen) < 3 {
		select {
		case ch := <-woken:
			seen[ch] = true
		case <-timeout:
			t.Fatalf("Listen woke only %v; want every channel once it listens", seen)
		}
	}
	drain(woken)
}

func drain(c chan string) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// TestNotifyReconnects: when its connection is lost, Listen connects again,
// wakes every worker (notifications were missed meanwhile), and passes
// on the notifications sent from then on.
func TestNotifyReconnects(t *testing.T) {
	ctx := context.Background()
	dsn := freshDatabase(t)
	writer, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	listener, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	woken := make(chan string, 256)
	lctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		listener.Listen(lctx, slog.New(slog.DiscardHandler), func(ch string) { woken <- ch })
	}()
	defer func() { stop(); <-done }()
	caughtUp(t, woken)
	if err := writer.Create(ctx, &backends.Message{ID: "r-1", Priority: 2, EmlPath: "x.eml"}); err != nil {
		t.Fatal(err)
	}
	addUntilWoken := func(what string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			if err := writer.AddEvent(ctx, &backends.Event{ID: backends.NewEventID(), MessageID: "r-1", Outcome: "DELAYED"}); err != nil {
				t.Fatal(err)
			}
			select {
			case ch := <-woken:
				if ch == postgres.ChannelEvents {
					return
				}
			case <-timeout:
				t.Fatalf("%s: no notification within 30s", what)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	addUntilWoken("before the connection is lost")

	// The server ends the listening connection, as a restart or a proxy
	// would.
	admin, err := postgres.Connect(ctx, dsn, postgres.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var ended int
	err = admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND datname = current_database()`, postgres.ListenerName).Scan(&ended)
	if err != nil || ended != 1 {
		t.Fatalf("terminated %d listening connections, %v; want 1", ended, err)
	}
	// Once listening again, it wakes every channel.
	caughtUp(t, woken)
	addUntilWoken("after the connection was lost")
}
