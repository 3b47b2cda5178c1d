// Command depth measures the relay with a deep outbox: it fills a fresh
// outbox of the chosen store with N messages through the store's own API
// (mostly READY deferred for hours, some acknowledged, a suspended batch at
// the head of the queue, each with its spool file), measures claims on it
// directly, then starts the real relay on it with smtp-sink as its smarthost
// and measures start-up, one new message end to end, /v1/stats and the
// first and a late page of the listings, each beside its target.
//
//	go run ./contrib/bench/depth -store bolt|mysql|postgres|dynamodb -n 1000000
//
// make bench-depth runs it (DEPTH_STORE, DEPTH_N). smtp-sink comes with
// Debian's postfix package.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/genropy/postino/backends"
)

type options struct {
	store      string
	n          int
	held       int
	workers    int
	samples    int
	claimTime  time.Duration
	bodySize   int
	files      bool
	keep       bool
	reuse      string
	maxFill    time.Duration
	postino    string
	sink       string
	dsn        string
	pgDSN      string
	endpoint   string
	work       string
	cpuProfile string
}

func main() {
	var o options
	flag.StringVar(&o.store, "store", "bolt", "outbox `store`: bolt, mysql, postgres or dynamodb")
	flag.IntVar(&o.n, "n", 0, "messages to fill the outbox with (default 1000000; 100000 for dynamodb)")
	flag.IntVar(&o.held, "held", -1, "messages of the suspended batch at the head of the queue (default 5000, at most a fifth of -n)")
	flag.IntVar(&o.workers, "workers", 0, "concurrent creates while filling (default 512; 32 for dynamodb)")
	flag.IntVar(&o.samples, "samples", 200, "claims timed in each case")
	flag.DurationVar(&o.claimTime, "claim-time", 2*time.Minute, "time the claims of each case for this long at most")
	flag.IntVar(&o.bodySize, "size", 1024, "bytes of each spool file's body")
	flag.BoolVar(&o.files, "files", true, "write each message's spool file, as intake does (the relay's start-up sweep walks them)")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory and the database or table")
	flag.StringVar(&o.reuse, "reuse", "", "measure only the claims, on the DynamoDB `table` an earlier run filled and kept (-keep), within the hour its deferred messages wait")
	flag.DurationVar(&o.maxFill, "max-fill", 15*time.Minute, "give up filling after this long, and report the rate")
	flag.StringVar(&o.postino, "postino", "", "relay `binary` (default: go build ./cmd/postino into the work directory)")
	flag.StringVar(&o.sink, "sink", "", "smtp-sink `path` (default: from PATH or /usr/sbin)")
	flag.StringVar(&o.dsn, "dsn", envOr("TEST_POSTINO_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/"), "MySQL server `DSN` without a database; a fresh database is made on it")
	flag.StringVar(&o.pgDSN, "pg-dsn", envOr("TEST_POSTINO_POSTGRES_DSN", "postgres://root@127.0.0.1:5432/test"), "PostgreSQL server `URL`; a fresh database is made on it")
	flag.StringVar(&o.endpoint, "endpoint", envOr("TEST_POSTINO_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000"), "DynamoDB `URL`; a fresh table is made on it")
	flag.StringVar(&o.work, "work", os.TempDir(), "`directory` under which the work directory is made")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the claims to `file`")
	flag.Parse()
	if o.n == 0 {
		o.n = 1000000
		if o.store == "dynamodb" {
			o.n = 100000
		}
	}
	if o.held < 0 {
		o.held = min(5000, o.n/5)
	}
	if o.workers == 0 {
		o.workers = 512
		if o.store == "dynamodb" {
			o.workers = 32
		}
	}
	log.SetFlags(0)
	if o.reuse != "" && o.store != "dynamodb" {
		log.Fatalf("depth: -reuse is for -store dynamodb, whose fill takes longest")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		log.Fatalf("depth: %v", err)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, o options) error {
	if o.reuse != "" {
		return rerun(ctx, o)
	}
	if o.n <= o.held {
		return fmt.Errorf("-n %d must exceed -held %d", o.n, o.held)
	}
	sink, err := findSink(o.sink)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp(o.work, "postino-depth.")
	if err != nil {
		return err
	}
	work, _ = filepath.Abs(work)
	if !o.keep {
		defer os.RemoveAll(work)
	}
	bin := o.postino
	if bin == "" {
		if bin, err = buildRelay(ctx, work); err != nil {
			return err
		}
	}
	st, err := newStore(ctx, o, work)
	if err != nil {
		return err
	}
	defer st.cleanup(o.keep)
	fmt.Printf("store=%s messages=%d held=%d\n", o.store, o.n, o.held)

	f := filler{o: o, outbox: st.outbox, spoolDir: filepath.Join(st.data, "spool"), now: time.Now().UTC()}
	if err := f.fill(ctx); err != nil {
		return err
	}
	curs, err := lateCursors(ctx, st.outbox, o.n)
	if err != nil {
		return err
	}
	claims, err := profiledClaims(ctx, o, st.outbox)
	if err != nil {
		return err
	}
	// The relay opens the store itself; bbolt allows one process only.
	if err := st.outbox.Close(); err != nil {
		return err
	}
	if err := timeOpen(ctx, st, o.cpuProfile); err != nil {
		return err
	}
	rf, err := measureRelay(ctx, relaySetup{bin: bin, sink: sink, work: work, data: st.data, args: st.relayArgs}, curs)
	if err != nil {
		return err
	}
	report(claims, rf)
	return nil
}

// rerun measures the claims on a table filled and kept by an earlier run.
func rerun(ctx context.Context, o options) error {
	st, err := reuseDynamoDB(ctx, o)
	if err != nil {
		return err
	}
	defer st.outbox.Close()
	fmt.Printf("store=dynamodb table=%s (reused)\n", o.reuse)
	claims, err := profiledClaims(ctx, o, st.outbox)
	if err != nil {
		return err
	}
	fmt.Printf("%-52s %-13s   %s\n", "figure", "measured", "target")
	claimLines(claims)
	return nil
}

// profiledClaims measures the claims, under the CPU profile when one is
// asked for.
func profiledClaims(ctx context.Context, o options, outbox backends.Outbox) (claimFigures, error) {
	var claims claimFigures
	err := profiled(o.cpuProfile, func() (err error) {
		claims, err = measureClaims(ctx, outbox, o.samples, o.claimTime)
		return err
	})
	return claims, err
}

// timeOpen opens the filled store once more and closes it: the part of
// the relay's start-up that is the store's own (bbolt, for one, reads its
// whole file at open to rebuild its freelist, which it does not keep).
// With a profile asked for, the open gets its own, beside it.
func timeOpen(ctx context.Context, st *store, profile string) error {
	if profile != "" {
		profile += ".open"
	}
	return profiled(profile, func() error {
		start := time.Now()
		o, err := st.open(ctx)
		if err != nil {
			return err
		}
		d := time.Since(start)
		if err := o.Close(); err != nil {
			return err
		}
		fmt.Printf("opening the filled store in-process, as the relay does at its start: %s\n", fmtDur(d))
		return nil
	})
}

// profiled runs fn under a CPU profile written to path, when one is asked.
func profiled(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	defer pprof.StopCPUProfile()
	return fn()
}

const (
	targetStartup = 5 * time.Second
	targetNew     = time.Second
	targetClaim   = 20 * time.Millisecond
	targetStats   = 100 * time.Millisecond
	targetPage    = 50 * time.Millisecond
)

func report(c claimFigures, r relayFigures) {
	fmt.Printf("%-52s %-13s   %s\n", "figure", "measured", "target")
	line("start-up to the first 250", r.startup, targetStartup)
	fmt.Printf("%-52s %s\n", "  (start-up to /readyz 200)", fmtDur(r.ready))
	line("new message, submission to SENT (max of 5)", r.newMax, targetNew)
	fmt.Printf("%-52s %s\n", "  (median of 5; its 250 alone, median)", fmtDur(r.newMedian)+"; "+fmtDur(r.acceptMedian))
	claimLines(c)
	line("/v1/stats, first", r.statsFirst, targetStats)
	line("/v1/stats, max of 20 more", r.statsMax, targetStats)
	// The dashboard's latest failed, bounced and undelivered read up to
	// 2,000 of the newest messages: no target, a figure to watch.
	fmt.Printf("%-52s %s\n", "  (/v1/stats/recent: first; max of 5 more)", fmtDur(r.recentFirst)+"; "+fmtDur(r.recentMax))
	for _, p := range r.pages {
		line(p.name, p.max, targetPage)
	}
}

func claimLines(c claimFigures) {
	line("claim, nothing due, p50", c.empty.p50, targetClaim)
	line("claim, nothing due, p99", c.empty.p99, targetClaim)
	line("claim, one due, p50", c.one.p50, targetClaim)
	line("claim, one due, p99", c.one.p99, targetClaim)
}

// line prints a figure beside its target.
func line(name string, d, target time.Duration) {
	verdict := "ok"
	if d >= target {
		verdict = "MISSED"
	}
	fmt.Printf("%-52s %-13s < %-8s %s\n", name, fmtDur(d), fmtDur(target), verdict)
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0f us", float64(d)/float64(time.Microsecond))
}
