package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// lines runs cmd with its output on a pipe, and returns the output's lines
// as they come and a stop that ends cmd and waits for it.
func lines(t *testing.T, cmd func(context.Context, []string, io.Writer) error, args ...string) (<-chan string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := cmd(ctx, args, w)
		w.Close()
		done <- err
	}()
	out := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			out <- sc.Text()
		}
		close(out)
	}()
	// Once: a test that stops cmd itself leaves its cleanup nothing to wait for.
	stop := sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() { stop() })
	return out, stop
}

func TestDNSAnswersTheZone(t *testing.T) {
	zone := filepath.Join(t.TempDir(), "zone")
	text := "; the sites\n\nd0.test. 300 IN MX 10 mx0.test.\nmx0.test. 300 IN A 127.0.1.1\n"
	if err := os.WriteFile(zone, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ := lines(t, dnsCmd, "-zone", zone)
	addr := <-out
	for _, tt := range []struct {
		name  string
		qtype uint16
		want  string
		rcode int
	}{
		{name: "d0.test.", qtype: dns.TypeMX, want: "mx0.test."},
		{name: "mx0.test.", qtype: dns.TypeA, want: "127.0.1.1"},
		{name: "d1.test.", qtype: dns.TypeMX, rcode: dns.RcodeNameError},
	} {
		m := new(dns.Msg).SetQuestion(tt.name, tt.qtype)
		r, err := dns.Exchange(m, addr)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if r.Rcode != tt.rcode {
			t.Errorf("%s: rcode %s, want %s", tt.name, dns.RcodeToString[r.Rcode], dns.RcodeToString[tt.rcode])
		}
		if tt.want != "" && (len(r.Answer) != 1 || !strings.Contains(r.Answer[0].String(), tt.want)) {
			t.Errorf("%s: answer %v, want %s", tt.name, r.Answer, tt.want)
		}
	}
}

func TestReadZoneEmpty(t *testing.T) {
	zone := filepath.Join(t.TempDir(), "zone")
	if err := os.WriteFile(zone, []byte("; nothing\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readZone(zone); err == nil || !strings.Contains(err.Error(), "holds no record") {
		t.Fatalf("readZone of an empty zone: %v", err)
	}
}

// TestSendToSink sends over several sessions to one host of a sink of two,
// and reads the sink's report: every message once, the sessions at once.
func TestSendToSink(t *testing.T) {
	sink, stopSink := lines(t, sinkCmd, "127.0.0.2", "127.0.0.3")
	port := <-sink
	send, _ := lines(t, sendCmd, "-s", "3", "-m", "30", "-l", "200", "-domains", "7", "127.0.0.3:"+port)
	var sent []string
	for l := range send {
		sent = append(sent, l)
	}
	if len(sent) != 2 || !strings.HasPrefix(sent[0], "first accepted at ") || !strings.HasPrefix(sent[1], "sent 30 in ") {
		t.Fatalf("send printed %q", sent)
	}
	if err := stopSink(); err != nil {
		t.Fatal(err)
	}
	var report []string
	for l := range sink {
		report = append(report, l)
	}
	// send's messages carry no X-Genro-Mail-ID: the relay adds it.
	want := []string{
		"sink messages: 30, distinct 0, duplicate deliveries 0, without X-Genro-Mail-ID 30",
		"sink sessions: 3 to 2 hosts; most at once to one host: ",
	}
	if len(report) != 2 || report[0] != want[0] || !strings.HasPrefix(report[1], want[1]) || !strings.Contains(report[1], "(127.0.0.3:"+port+")") {
		t.Fatalf("sink reported %q, want %q", report, want)
	}
}

func TestSendRefusesABadLoad(t *testing.T) {
	for _, args := range [][]string{
		{"-m", "0", "127.0.0.1:1"},
		{"-to", "user@example.net", "127.0.0.1:1"},
		{},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := sendCmd(ctx, args, io.Discard)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "give the relay's HOST:PORT") {
			t.Errorf("send %q: %v", args, err)
		}
	}
}
