package submissions_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/internal/testrig/smtptest"
)

// BenchmarkThroughput takes b.N messages into a relay's bbolt outbox and
// delivers them to a test upstream, from the first handed over to the last
// delivered: over SMTP (20 sessions), and as submissions committed by 8
// app writers, 100 to a transaction, into PostgreSQL.
//
//	go test -run X -bench Throughput -benchtime 5000x ./relay/submissions/
func BenchmarkThroughput(b *testing.B) {
	b.Run("smtp", func(b *testing.B) {
		a := newApp(b, "postgres")
		up := smtptest.Start(b, smtptest.Options{})
		addr, _ := startRelayPoll(b, a, up, time.Second)
		ids := benchIDs("smtp", b.N)
		b.ResetTimer()
		feed := make(chan string)
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() { sendSMTP(b, addr, feed) })
		}
		for _, id := range ids {
			feed <- id
		}
		close(feed)
		wg.Wait()
		waitDelivered(b, up, b.N)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
	b.Run("postgres", func(b *testing.B) {
		a := newApp(b, "postgres")
		up := smtptest.Start(b, smtptest.Options{})
		startRelayPoll(b, a, up, time.Second)
		ids := benchIDs("sub", b.N)
		b.ResetTimer()
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for chunk := range slices.Chunk(ids[w*len(ids)/8:(w+1)*len(ids)/8], 100) {
					subs := make([]submission, len(chunk))
					for i, id := range chunk {
						subs[i] = submission{ID: id, From: "app@example.com", To: []string{"user@example.net"}, Message: plain(id)}
					}
					a.commit(b, subs...)
				}
			})
		}
		wg.Wait()
		waitDelivered(b, up, b.N)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
}

// BenchmarkCommitToReady commits b.N submissions one at a time into
// PostgreSQL, each once the last is READY, and reports the time from the
// app's COMMIT returning to the message being READY: the relay polls every
// minute, so NOTIFY is what wakes it.
//
//	go test -run X -bench CommitToReady -benchtime 300x ./relay/submissions/
func BenchmarkCommitToReady(b *testing.B) {
	a := newApp(b, "postgres")
	up := smtptest.Start(b, smtptest.Options{})
	_, c := startRelayPoll(b, a, up, time.Minute)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("lat-%06d", i)
		a.commit(b, submission{ID: id, From: "app@example.com", To: []string{"user@example.net"}, Message: plain(id)})
		committed := time.Now()
		var ready time.Time
		waitFor(b, time.Minute, func() string { return id + " not READY" }, func() bool {
			m, err := c.Get(context.Background(), id)
			if err != nil {
				return false
			}
			for _, h := range m.History {
				if h.Status == "READY" {
					ready = h.At
					return true
				}
			}
			return false
		})
		lat = append(lat, ready.Sub(committed))
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
}

func benchIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%07d", prefix, i)
	}
	return ids
}

// sendSMTP sends the message of each id on one session.
func sendSMTP(b testing.TB, addr string, ids <-chan string) {
	c, err := smtp.Dial(addr)
	if err != nil {
		b.Error(err)
		return
	}
	defer c.Close()
	for id := range ids {
		if err := c.Mail("app@example.com", nil); err != nil {
			b.Error(err)
			return
		}
		if err := c.Rcpt("user@example.net", nil); err != nil {
			b.Error(err)
			return
		}
		w, err := c.Data()
		if err != nil {
			b.Error(err)
			return
		}
		w.Write([]byte("X-Genro-Mail-ID: " + id + "\r\n"))
		w.Write(plain(id))
		if err := w.Close(); err != nil {
			b.Error(err)
			return
		}
	}
	c.Quit()
}

func waitDelivered(b *testing.B, up *smtptest.Server, n int) {
	waitFor(b, 10*time.Minute, func() string { return fmt.Sprintf("%d of %d delivered", len(up.Messages()), n) },
		func() bool { return len(up.Messages()) >= n })
}
