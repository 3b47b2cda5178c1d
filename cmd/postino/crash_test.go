package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/relay/admin"
)

// binary is postino built once for the tests that run it as a process.
var binary struct {
	once sync.Once
	path string
	err  error
}

func buildBinary(t *testing.T) string {
	t.Helper()
	binary.once.Do(func() {
		dir, err := os.MkdirTemp("", "postino-bin")
		if err != nil {
			binary.err = err
			return
		}
		binary.path = filepath.Join(dir, "postino")
		if out, err := exec.Command("go", "build", "-o", binary.path, ".").CombinedOutput(); err != nil {
			binary.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// process is a postino serve running as its own process.
type process struct {
	cmd           *exec.Cmd
	smtp, admin   string
	data, logPath string
}

// startProcess runs postino serve on data with the extra arguments and
// environment, and waits for it to be ready. Ports are picked free and
// then given to the relay, so another process may take one in between (a
// second test run on the machine): a relay that could not listen is
// started again on others.
func startProcess(t *testing.T, bin, data string, args, env []string) *process {
	t.Helper()
	for attempt := 1; ; attempt++ {
		p, err := tryProcess(t, bin, data, args, env)
		if err == nil {
			return p
		}
		log, _ := os.ReadFile(p.logPath)
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			t.Fatalf("postino did not become ready: %v:\n%s", err, log)
		}
		t.Logf("a port was taken meanwhile, starting the relay on others:\n%s", log)
	}
}

// errPortTaken is a relay's failure to listen on a port picked free.
var errPortTaken = errors.New("a port was taken between its choice and the relay's start")

// tryProcess starts a relay once: it returns when the relay is ready, or
// has stopped because a port was taken, or after a deadline.
func tryProcess(t *testing.T, bin, data string, args, env []string) (*process, error) {
	t.Helper()
	p := &process{smtp: freeAddr(t), admin: freeAddr(t), data: data,
		logPath: filepath.Join(data, fmt.Sprintf("serve-%d.log", time.Now().UnixNano()))}
	logf, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, append([]string{"serve", "--data", data, "--listen", p.smtp, "--admin", p.admin}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.Env = append(append(os.Environ(), "POSTINO_INTAKE_POLL=100ms", "POSTINO_DELIVERY_POLL=100ms"), env...)
	dieWithTest(p.cmd)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
		logf.Close()
	})
	// Generous: a relay on a store that serves a loaded machine's tests
	// (DynamoDB Local, two make test at once) takes a while to open it.
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get("http://" + p.admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p, nil
			}
		}
		if log, _ := os.ReadFile(p.logPath); bytes.Contains(log, []byte("address already in use")) {
			p.cmd.Process.Kill()
			p.cmd.Wait()
			return p, errPortTaken
		}
		if time.Now().After(deadline) {
			return p, errors.New("not ready after 90 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type outcome int

const (
	notKept   outcome = iota // refused, or cut before the final dot was sent
	ambiguous                // the final dot was sent, no reply came back
	acked                    // 250
)

// sendSlowly submits one message in two halves, so that a kill can land
// while the relay holds it half received.
func sendSlowly(addr, id string) outcome {
	c, err := smtp.Dial(addr)
	if err != nil {
		return notKept
	}
	defer c.Close()
	if c.Mail("app@example.com", nil) != nil || c.Rcpt("user@example.net", nil) != nil {
		return notKept
	}
	w, err := c.Data()
	if err != nil {
		return notKept
	}
	body := strings.Repeat("crash test line\r\n", 200)
	if _, err := fmt.Fprintf(w, "From: app@example.com\r\nX-Genro-Mail-ID: %s\r\nSubject: crash\r\n\r\n%s", id, body); err != nil {
		return notKept
	}
	time.Sleep(time.Duration(len(id)%3) * time.Millisecond)
	if _, err := fmt.Fprint(w, body); err != nil {
		return notKept
	}
	resp, err := w.CloseWithResponse()
	if err == nil && strings.Contains(resp.StatusText, "queued as "+id) {
		return acked
	}
	var se *smtp.SMTPError
	if errors.As(err, &se) {
		return notKept
	}
	return ambiguous
}

func listAll(t *testing.T, c *admin.Client) map[string]admin.Message {
	t.Helper()
	out := map[string]admin.Message{}
	after := ""
	for {
		page, err := c.List(context.Background(), admin.ListFilter{Limit: 1000, After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page.Messages {
			out[m.ID] = m
		}
		if page.Next == "" {
			return out
		}
		after = page.Next
	}
}

// TestCrashRecovery kills the relay with SIGKILL while concurrent clients
// are sending and it is delivering, restarts it, and checks that every
// message answered 250 is kept and delivered, that nothing else was kept,
// and that only messages in flight at the kill were delivered twice.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a relay process")
	}
	bin := buildBinary(t)
	data := t.TempDir()
	up := smtptest.Start(t, smtptest.Options{})
	up.Hang(20 * time.Millisecond) // deliveries take a while, so that some are cut
	p := startProcess(t, bin, data, []string{"--smarthost", up.Addr}, nil)

	const clients = 16
	const killAfter = 300
	var (
		mu       sync.Mutex
		results  = map[string]outcome{}
		ackCount atomic.Int64
		killed   atomic.Bool
		wg       sync.WaitGroup
	)
	for c := range clients {
		wg.Go(func() {
			for i := 0; !killed.Load(); i++ {
				id := fmt.Sprintf("crash-%02d-%04d", c, i)
				o := sendSlowly(p.smtp, id)
				mu.Lock()
				results[id] = o
				mu.Unlock()
				if o == acked {
					ackCount.Add(1)
				}
			}
		})
	}
	for ackCount.Load() < killAfter || len(up.Messages()) < killAfter/3 {
		time.Sleep(time.Millisecond)
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	killed.Store(true)
	p.cmd.Wait()
	wg.Wait()
	deliveredAtKill := len(up.Messages())

	counts := map[outcome]int{}
	for _, o := range results {
		counts[o]++
	}
	t.Logf("at the kill: %d acknowledged, %d with no reply after the final dot, %d refused or cut short; %d delivered",
		counts[acked], counts[ambiguous], counts[notKept], deliveredAtKill)

	p2 := startProcess(t, bin, data, []string{"--smarthost", up.Addr}, nil)
	client := &admin.Client{Base: p2.admin}
	kept := listAll(t, client)
	for id, o := range results {
		m, ok := kept[id]
		switch {
		case o == acked && !ok:
			t.Errorf("%s was answered 250 but is gone", id)
		case o == notKept && ok:
			t.Errorf("%s was never acknowledged but was kept (%s)", id, m.Status)
		}
		if ok && (strings.HasPrefix(m.Status, "FAILED") || strings.HasPrefix(m.Status, "INVALID")) {
			t.Errorf("%s is %s after the restart: %s", id, m.Status, m.Reason)
		}
	}
	for id := range kept {
		if _, sent := results[id]; !sent {
			t.Errorf("%s is in the outbox but was never sent", id)
		}
	}
	// No spool file is left without the row that points at it.
	paths := map[string]bool{}
	for _, m := range kept {
		paths[m.EmlPath] = true
	}
	filepath.WalkDir(filepath.Join(data, "spool"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(filepath.Join(data, "spool"), path)
			if !paths[rel] {
				t.Errorf("orphan spool file %s survived the restart", rel)
			}
		}
		return nil
	})

	// Every kept message is delivered after the restart.
	deadline := time.Now().Add(60 * time.Second)
	for {
		done := 0
		for _, m := range listAll(t, client) {
			if m.Status == "SENT-ACKNOWLEDGED" {
				done++
			}
		}
		if done == len(kept) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages delivered after the restart", done, len(kept))
		}
		time.Sleep(100 * time.Millisecond)
	}
	times := map[string]int{}
	for _, m := range up.Messages() {
		times[m.Header("X-Genro-Mail-ID")]++
	}
	dups := 0
	for id := range kept {
		switch n := times[id]; {
		case n == 0:
			t.Errorf("%s is SENT-ACKNOWLEDGED but the upstream never got it", id)
		case n > 1:
			dups++
			// Only a message the dead relay held in PROCESSING may go twice.
			m, err := client.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			inFlight := false
			for _, h := range m.History {
				if h.Status == "READY" && strings.Contains(h.Reason, "lease of PROCESSING") {
					inFlight = true
				}
			}
			if !inFlight {
				t.Errorf("%s was delivered %d times but was not in flight at the kill: %s", id, n, statusesOf(m))
			}
		}
	}
	t.Logf("after the restart: %d messages kept (%d of them had no reply), all delivered; %d delivered twice, all in flight at the kill",
		len(kept), len(kept)-counts[acked], dups)

	p2.cmd.Process.Signal(syscall.SIGTERM)
	if err := p2.cmd.Wait(); err != nil {
		log, _ := os.ReadFile(p2.logPath)
		t.Errorf("exit after SIGTERM: %v\n%s", err, log)
	}
}

func statusesOf(m admin.Message) string {
	var out []string
	for _, h := range m.History {
		out = append(out, h.Status)
	}
	return strings.Join(out, " ")
}
