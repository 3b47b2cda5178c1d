//go:build linux

package relay_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/emersion/go-smtp"
)

// TestDiskFull runs the relay on a small tmpfs, fills it, and checks that a
// message is refused with 451 and leaves nothing behind, and that the relay
// accepts again once space is back.
func TestDiskFull(t *testing.T) {
	cfg, _ := testConfig(t)
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
	var se *smtp.SMTPError
	if !errors.As(err, &se) || se.Code != 451 || se.EnhancedCode != (smtp.EnhancedCode{4, 3, 0}) {
		t.Fatalf("on a full disk: %v, want 451 4.3.0", err)
	}
	t.Logf("refused with: %v", se)
	c.Close()
	if n := countSpool(t, cfg.DataDir); n != before {
		t.Errorf("%d spool files after the refusal, %d before", n, before)
	}
	if _, err := rl.client.Get(t.Context(), "on-full-disk"); err == nil {
		t.Error("the refused message has a row")
	}

	os.Remove(filler)
	id := send(t, addr, "X-Genro-Mail-ID: on-full-disk\r\n")
	waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
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
