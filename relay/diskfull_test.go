//go:build linux

package relay_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/relay/admin"
)

// TestDiskFull runs the relay on a small tmpfs, fills it, and checks that a
// message is refused with 451 (its write failed) or 452 (refused at MAIL)
// and leaves nothing behind, that /readyz says why the relay is not ready,
// and that the relay is ready and accepts again by itself once space is
// back.
func TestDiskFull(t *testing.T) {
	cfg, _ := testConfig(t)
	// 1.5 MiB must stay free (spool.min_free_space's default) of 8.
	cfg.SMTP.MaxMessageSize = 1 << 20
	if err := syscall.Mount("tmpfs", cfg.DataDir, "tmpfs", 0, "size=8m"); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root): %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(cfg.DataDir, syscall.MNT_DETACH) })
	rl := start(t, cfg)
	addr := rl.r.SMTPAddr().String()
	send(t, addr, "") // the spool bucket and the outbox exist

	filler := filepath.Join(cfg.DataDir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	f.Close()
	before := countSpool(t, cfg.DataDir)

	c, err := smtp.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	body := "From: app@example.com\r\nX-Genro-Mail-ID: on-full-disk\r\n\r\n" + strings.Repeat(strings.Repeat("x", 78)+"\r\n", 1300)
	err = c.SendMail("app@example.com", []string{"user@example.net"}, strings.NewReader(body))
	// 451 when the write failed, 452 when the relay had seen the disk
	// full already: both temporary, both naming the cause.
	var se *smtp.SMTPError
	if !errors.As(err, &se) || (se.Code != 451 || se.EnhancedCode != (smtp.EnhancedCode{4, 3, 0})) &&
		(se.Code != 452 || se.EnhancedCode != (smtp.EnhancedCode{4, 3, 1})) {
		t.Fatalf("on a full disk: %v, want 451 4.3.0 or 452 4.3.1", err)
	}
	t.Logf("refused with: %v", se)
	c.Close()
	if n := countSpool(t, cfg.DataDir); n != before {
		t.Errorf("%d spool files after the refusal, %d before", n, before)
	}
	if _, err := rl.client.Get(t.Context(), "on-full-disk"); err == nil {
		t.Error("the refused message has a row")
	}

	ready := waitReady(t, rl, "not ready")
	t.Logf("while full: %+v", ready)
	if why := ready.Checks["spool space"]; !strings.Contains(why, "spool.min_free_space") || !strings.Contains(why, "452 4.3.1") {
		t.Errorf("readiness says %q of the spool's space", why)
	}
	// Now refused before the data.
	c, err = smtp.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Mail("app@example.com", nil); !errors.As(err, &se) || se.Code != 452 || se.EnhancedCode != (smtp.EnhancedCode{4, 3, 1}) {
		t.Errorf("MAIL on a full disk: %v, want 452 4.3.1", err)
	}

	// Space back, and nothing written meanwhile: the relay sees it.
	os.Remove(filler)
	waitReady(t, rl, "ready")
	id := send(t, addr, "X-Genro-Mail-ID: on-full-disk\r\n")
	waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
}

// waitReady asks /readyz until its status is want, and returns the
// answer. (The API client gives no checks with a 503.)
func waitReady(t *testing.T, rl *running, want string) admin.Readiness {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var ready admin.Readiness
		resp, err := http.Get("http://" + rl.r.AdminAddr().String() + "/readyz")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&ready)
			resp.Body.Close()
		}
		if err == nil && ready.Status == want {
			return ready
		}
		if time.Now().After(deadline) {
			t.Fatalf("readiness %+v (%v), want %s", ready, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func countSpool(t *testing.T, data string) int {
	n := 0
	filepath.WalkDir(filepath.Join(data, "spool"), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}
