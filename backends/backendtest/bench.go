package backendtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

// BenchOpener gives a benchmark a store of its own.
type BenchOpener func(b *testing.B) backends.Outbox

// Benchmark measures create, claim and transition from parallel callers,
// as the relay's sessions and workers use them.
func Benchmark(b *testing.B, open BenchOpener) {
	b.Run("Create", func(b *testing.B) {
		s := open(b)
		var n atomic.Int64
		b.SetParallelism(10)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := s.Create(context.Background(), benchMessage(fmt.Sprintf("bc-%d", n.Add(1)))); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("Claim", func(b *testing.B) {
		s := open(b)
		seedAccepted(b, s, "bq", b.N)
		var claimed atomic.Int64
		b.SetParallelism(4)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				now := time.Now().UTC()
				ms, err := s.Claim(context.Background(), backends.Claim{From: backends.StatusAccepted, To: backends.StatusIntaking,
					Now: now, LeaseUntil: now.Add(time.Minute), Limit: 1})
				if err != nil {
					b.Fatal(err)
				}
				claimed.Add(int64(len(ms)))
			}
		})
		b.StopTimer()
		if int(claimed.Load()) != b.N {
			b.Errorf("%d claimed of %d", claimed.Load(), b.N)
		}
	})
	b.Run("Transition", func(b *testing.B) { benchMoves(b, open(b), "bt", backends.StatusIntaking) })
	// An outcome: a move that the counts per minute count, where the
	// move to INTAKING counts nothing.
	b.Run("Outcome", func(b *testing.B) { benchMoves(b, open(b), "bo", backends.StatusInvalid) })
}

// benchMoves moves b.N messages from ACCEPTED to to, from parallel
// callers.
func benchMoves(b *testing.B, s backends.Outbox, prefix string, to backends.Status) {
	seedAccepted(b, s, prefix, b.N)
	var n atomic.Int64
	b.SetParallelism(10)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			t := backends.Transition{ID: fmt.Sprintf("%s-%d", prefix, n.Add(1)), From: backends.StatusAccepted, To: to, Reason: "bench"}
			if to.Working() {
				t.LeaseUntil = time.Now().Add(time.Minute)
			}
			if err := s.Transition(context.Background(), t); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func benchMessage(id string) *backends.Message {
	return &backends.Message{ID: id, MessageID: id + "@bench.example", Priority: backends.PriorityNormal, EmlPath: "20260101/0000/" + id + ".eml",
		Reason: "accepted from 127.0.0.1",
		Envelope: backends.Envelope{Sender: "app@example.com", Recipients: []string{"user@example.net"}, ClientAddr: "127.0.0.1:40000",
			Helo: "app.local", ReceivedAt: time.Now(), Size: 4400}}
}

// seedAccepted creates n messages named prefix-1 … prefix-n.
func seedAccepted(b *testing.B, s backends.Outbox, prefix string, n int) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if err := s.Create(context.Background(), benchMessage(fmt.Sprintf("%s-%d", prefix, i))); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
