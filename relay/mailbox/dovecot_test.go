package mailbox

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/internal/testrig/dovecottest"
	"github.com/genropy/postino/internal/testrig/outboxtest"
)

// TestDovecot watches a real server over each TLS mode, and goes on
// through what real servers do: a UIDVALIDITY change that ends the
// session, and a restart.
func TestDovecot(t *testing.T) {
	srv := dovecottest.Start(t, dovecottest.Options{TLS: true})
	for _, tt := range []struct {
		mode, addr string
	}{{TLSStart, srv.Addr}, {TLSImplicit, srv.TLSAddr}, {TLSNone, srv.Addr}} {
		t.Run(tt.mode, func(t *testing.T) {
			store := outboxtest.Store(t)
			folder := "Bounces-" + tt.mode
			srv.Append(t, folder, msg("bounce first"))
			h := &recorder{}
			cfg := Config{Name: "dovecot", Addr: tt.addr, TLS: tt.mode, CAFile: srv.CAFile, Username: srv.User, Password: srv.Password,
				Folder: folder, Processed: folder + "-done", Unmatched: folder + "-other", Poll: time.Hour, Lease: time.Minute, Owner: "relay-a"}
			p := New(cfg, store, h, slog.New(slog.NewTextHandler(io.Discard, nil)), NewMetrics(prometheus.NewRegistry()))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { p.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()

			waitFor(t, "the first message", func() bool { return len(h.read()) == 1 })
			waitFor(t, "the move", func() bool { return len(srv.Messages(t, cfg.Processed)) == 1 })
			// IDLE brings the next one at once (the poll is an hour).
			srv.Append(t, folder, msg("newsletter reply"))
			waitFor(t, "a message during IDLE", func() bool { return len(srv.Messages(t, cfg.Unmatched)) == 1 })

			// Dovecot ends the session on a UIDVALIDITY change; the poller
			// comes back and reads what arrives next.
			srv.ResetUIDValidity(t, folder)
			srv.Append(t, folder, msg("bounce after the change"))
			waitFor(t, "the message after the UIDVALIDITY change", func() bool { return len(h.read()) == 3 })

			srv.Restart(t)
			srv.Append(t, folder, msg("bounce after the restart"))
			waitFor(t, "the message after the restart", func() bool { return len(h.read()) == 4 })
			if got := h.read(); !slices.Equal(got, []string{"bounce first", "newsletter reply", "bounce after the change", "bounce after the restart"}) {
				t.Errorf("read %v", got)
			}
			waitFor(t, "Ready", func() bool { return p.Ready() == nil })
		})
	}
}
