// Package relaytest runs a relay inside a test's process.
package relaytest

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/genropy/postino/relay"
)

// Start runs a relay on cfg, its logs discarded, until the test ends or
// stop is called; stop reports what Run returned, and may be called again.
func Start(t testing.TB, cfg relay.Config) (r *relay.Relay, stop func() error) {
	t.Helper()
	return StartLogged(t, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// StartLogged is Start with the relay logging to log.
func StartLogged(t testing.TB, cfg relay.Config, log *slog.Logger) (r *relay.Relay, stop func() error) {
	t.Helper()
	r, err := relay.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}
	t.Cleanup(func() { stop() })
	return r, stop
}
