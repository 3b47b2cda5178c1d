package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/emersion/go-smtp"
)

type relaySetup struct {
	bin, sink, work, data string
	args                  []string
}

type pageFigure struct {
	name       string
	first, max time.Duration
}

type relayFigures struct {
	startup, ready                  time.Duration
	newMax, newMedian, acceptMedian time.Duration
	statsFirst, statsMax            time.Duration
	recentFirst, recentMax          time.Duration
	pages                           []pageFigure
}

// relayRun is the relay under measure, with its sink.
type relayRun struct {
	smtp, admin string
	http        *http.Client
}

// measureRelay starts smtp-sink and the relay on the filled outbox, and
// measures what an operator and an app see of it.
func measureRelay(ctx context.Context, s relaySetup, c cursors) (relayFigures, error) {
	var out relayFigures
	ports, err := freePorts(3)
	if err != nil {
		return out, err
	}
	r := &relayRun{smtp: ports[0], admin: ports[1], http: &http.Client{Timeout: time.Minute}}
	sinkArgs := []string{ports[2], "1024"}
	if os.Geteuid() == 0 {
		sinkArgs = append([]string{"-u", "postfix"}, sinkArgs...)
	}
	sink := exec.Command(s.sink, sinkArgs...)
	sink.Stderr = os.Stderr
	if err := sink.Start(); err != nil {
		return out, fmt.Errorf("smtp-sink: %w", err)
	}
	defer func() { sink.Process.Kill(); sink.Wait() }()

	logPath := filepath.Join(s.work, "serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return out, err
	}
	defer logf.Close()
	args := append([]string{"serve", "--data", s.data, "--listen", r.smtp, "--admin", r.admin, "--smarthost", ports[2]}, s.args...)
	relay := exec.Command(s.bin, args...)
	relay.Stdout, relay.Stderr = logf, logf
	start := time.Now()
	if err := relay.Start(); err != nil {
		return out, err
	}
	exited := make(chan struct{})
	go func() { relay.Wait(); close(exited) }()
	defer stopRelay(relay, exited)

	if out.startup, out.ready, err = r.startUp(ctx, start, exited); err != nil {
		return out, fmt.Errorf("%w (the relay's log: %s)", err, logPath)
	}
	if err := r.measure(ctx, c, &out); err != nil {
		return out, fmt.Errorf("%w (the relay's log: %s)", err, logPath)
	}
	return out, nil
}

func (r *relayRun) measure(ctx context.Context, c cursors, out *relayFigures) error {
	var err error
	if out.newMax, out.newMedian, out.acceptMedian, err = r.newMessages(ctx, 5); err != nil {
		return err
	}
	if out.statsFirst, out.statsMax, err = r.timeGet(ctx, "/v1/stats", 20); err != nil {
		return err
	}
	if out.recentFirst, out.recentMax, err = r.timeGet(ctx, "/v1/stats/recent", 5); err != nil {
		return err
	}
	pages := []struct{ name, path string }{
		{"listing, newest first: first page (50)", "/v1/messages?limit=50"},
		{"listing, newest first: a late page (50)", "/v1/messages?limit=50&after=" + url.QueryEscape(c.newest)},
		{"listing, READY in claim order: first page", "/v1/messages?status=READY&limit=50"},
		{"listing, READY in claim order: a late page", "/v1/messages?status=READY&limit=50&after=" + url.QueryEscape(c.ready)},
	}
	for _, p := range pages {
		first, maxd, err := r.timeGet(ctx, p.path, 5)
		if err != nil {
			return err
		}
		out.pages = append(out.pages, pageFigure{name: p.name + ", max of 6", first: first, max: max(first, maxd)})
	}
	return nil
}

// startUp sends one message again and again from the relay's start until
// one is answered 250, and notes when /readyz first answers 200.
func (r *relayRun) startUp(ctx context.Context, start time.Time, exited <-chan struct{}) (first250, ready time.Duration, err error) {
	readyc := make(chan time.Duration, 1)
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	go func() {
		for pollCtx.Err() == nil {
			if _, err := r.get(pollCtx, "/readyz"); err == nil {
				readyc <- time.Since(start)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		select {
		case <-exited:
			return 0, 0, errors.New("the relay exited during start-up")
		default:
		}
		if err := send(r.smtp, "depth-startup"); err == nil {
			first250 = time.Since(start)
			break
		} else if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("no 250 within 5 minutes of the start: %w", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case ready = <-readyc:
	case <-time.After(time.Minute):
		return 0, 0, errors.New("/readyz did not answer 200 within a minute of the first 250")
	}
	if _, err := r.waitSent(ctx, "depth-startup"); err != nil {
		return 0, 0, err
	}
	return first250, ready, nil
}

// newMessages submits n messages one after the other and times each from
// submission to SENT, as the admin API shows it.
func (r *relayRun) newMessages(ctx context.Context, n int) (maxd, median, acceptMedian time.Duration, err error) {
	var total, accept []time.Duration
	for i := range n {
		id := fmt.Sprintf("depth-new-%d", i)
		start := time.Now()
		if err := send(r.smtp, id); err != nil {
			return 0, 0, 0, err
		}
		accept = append(accept, time.Since(start))
		if _, err := r.waitSent(ctx, id); err != nil {
			return 0, 0, 0, err
		}
		total = append(total, time.Since(start))
	}
	slices.Sort(total)
	slices.Sort(accept)
	return total[n-1], total[n/2], accept[n/2], nil
}

// waitSent polls the message until it is SENT (or past it), and returns
// how long that took.
func (r *relayRun) waitSent(ctx context.Context, id string) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(2 * time.Minute)
	for {
		body, err := r.get(ctx, "/v1/messages/"+id)
		if err != nil && !strings.Contains(err.Error(), "404") {
			return 0, err
		}
		var m struct {
			Status string `json:"status"`
		}
		if err == nil {
			if err := json.Unmarshal(body, &m); err != nil {
				return 0, err
			}
		}
		if m.Status == "SENT" || m.Status == "CALLING-SENT-CALLBACK" || m.Status == "SENT-ACKNOWLEDGED" {
			return time.Since(start), nil
		}
		if strings.Contains(m.Status, "FAILED") || strings.Contains(m.Status, "INVALID") || time.Now().After(deadline) {
			return 0, fmt.Errorf("message %s is %q %s after its 250", id, m.Status, time.Since(start).Round(time.Millisecond))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// timeGet times n+1 requests of path, and returns the first and the
// slowest of the others.
func (r *relayRun) timeGet(ctx context.Context, path string, n int) (first, maxd time.Duration, err error) {
	for i := 0; i <= n; i++ {
		start := time.Now()
		if _, err := r.get(ctx, path); err != nil {
			return 0, 0, err
		}
		d := time.Since(start)
		if i == 0 {
			first = d
			continue
		}
		maxd = max(maxd, d)
	}
	return first, maxd, nil
}

func (r *relayRun) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.admin+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// send submits one message with the given X-Genro-Mail-ID and returns once
// it is answered 250, as the cmd/postino tests do (go-smtp's client asks for
// no SMTPUTF8 unless told, and the relay lets plain ASCII mail on anyway).
func send(addr, id string) error {
	c, err := smtp.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	msg := fmt.Sprintf("X-Genro-Mail-ID: %s\r\nFrom: app@example.com\r\nTo: %s\r\nSubject: depth %s\r\n\r\nA new message while the queue is deep.\r\n", id, rcpt, id)
	if err := c.SendMail("app@example.com", []string{rcpt}, strings.NewReader(msg)); err != nil {
		return err
	}
	return c.Quit()
}

func freePorts(n int) ([]string, error) {
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// stopRelay stops the relay as an operator would, and kills it when it
// takes too long.
func stopRelay(cmd *exec.Cmd, exited <-chan struct{}) {
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
}
