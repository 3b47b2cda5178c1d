package main

import (
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/relaytest"
)

// send's message reaches an upstream that lacks SMTPUTF8, as smtp-sink
// does, through the relay.
func TestSendThroughRelay(t *testing.T) {
	up := smtptest.Start(t, smtptest.Options{NoSMTPUTF8: true})
	cfg := relay.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.SMTP.Listen = "127.0.0.1:0"
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Routes.Default.Smarthost = up.Addr
	r, _ := relaytest.Start(t, cfg)
	if err := send(r.SMTPAddr().String(), "depth-send"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); len(up.Messages()) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the upstream got nothing after 60s")
		}
	}
	if m := up.Messages()[0]; !strings.Contains(string(m.Data), "X-Genro-Mail-ID: depth-send") {
		t.Errorf("the upstream got %q", m.Data)
	}
}
