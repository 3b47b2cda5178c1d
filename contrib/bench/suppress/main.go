// Command suppress fills an outbox's suppression list and measures it:
// fill imports N entries the way `postino suppression import` does
// (backends.PrepareImport, then one ImportSuppressions) and prints how long
// that took; lookup times Suppressed, the lookup the intake worker and the
// delivery engine make for each message, and prints its percentiles; bench
// does both on a fresh outbox it makes and drops.
//
//	suppress fill   -backend bolt -path DATA/outbox.db -n 1000000
//	suppress lookup -backend mysql -dsn 'root@tcp(127.0.0.1:3306)/DB' -n 20000 -rcpts 5
//	suppress bench  -backend postgres -n 1000000 -lookups 20000
//
// fill and lookup take an outbox that exists: bbolt's file is made at its
// first open, a MySQL or PostgreSQL database needs `postino migrate` first.
// bench makes a database on the server of TEST_POSTINO_MYSQL_DSN or
// TEST_POSTINO_POSTGRES_DSN (-server), or a bbolt file under the temporary
// directory. make bench-suppress runs it. The entries'
// addresses are all @dNN.suppressed.example, which contrib/bench/load.sh's
// recipient (user@example.net) never matches: a load on a filled list
// measures the lookups, not the recipients they hold back. load.sh -u N
// runs fill on the fresh outbox before the relay starts.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/relay"
)

const usage = `usage: suppress fill|lookup|bench [flags]
  suppress fill   -backend bolt|mysql|postgres [-dsn DSN | -path FILE] [-n 1000000]
  suppress lookup -backend bolt|mysql|postgres [-dsn DSN | -path FILE] [-n 20000] [-rcpts 5] [-hits 0.2]
  suppress bench  -backend bolt|mysql|postgres [-server DSN] [-n 1000000] [-lookups 20000] [-rcpts 5] [-hits 0.2]
suppress CMD -h lists CMD's flags`

func main() {
	log.SetFlags(0)
	if len(os.Args) < 2 {
		log.Fatal(usage)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "fill":
		err = fillCmd(ctx, args)
	case "lookup":
		err = lookupCmd(ctx, args)
	case "bench":
		err = benchCmd(ctx, args)
	default:
		log.Fatalf("suppress: unknown command %q\n%s", cmd, usage)
	}
	if err != nil {
		log.Fatalf("suppress %s: %v", os.Args[1], err)
	}
}

// storeFlags name the outbox, as serve's flags of the same names do.
type storeFlags struct {
	backend, dsn, path string
}

func (s *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.backend, "backend", "bolt", "outbox `store`: bolt, mysql or postgres")
	fs.StringVar(&s.dsn, "dsn", "", "the MySQL or PostgreSQL outbox's `DSN`, its database migrated (postino migrate)")
	fs.StringVar(&s.path, "path", "", "the bbolt outbox's `file` (the relay's is DATA/outbox.db)")
}

// open opens the outbox through the relay's configuration, as serve does.
func (s storeFlags) open(ctx context.Context) (backends.Outbox, error) {
	if s.dsn == "" && s.path == "" {
		return nil, fmt.Errorf("give the outbox: -path FILE for bolt, -dsn DSN for mysql or postgres")
	}
	cfg, err := s.config()
	if err != nil {
		return nil, err
	}
	return cfg.OpenOutbox(ctx)
}

// config is a relay's configuration whose outbox s names.
func (s storeFlags) config() (relay.Config, error) {
	cfg := relay.DefaultConfig()
	cfg.Outbox.Backend = s.backend
	switch s.backend {
	case "bolt":
		cfg.Outbox.Bolt.Path = s.path
	case "mysql", "postgres":
		cfg.Outbox.MySQL.DSN, cfg.Outbox.Postgres.DSN = s.dsn, s.dsn
	default:
		return cfg, fmt.Errorf("-backend %q: use bolt, mysql or postgres", s.backend)
	}
	return cfg, nil
}

func fillCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("fill", flag.ExitOnError)
	var st storeFlags
	st.register(fs)
	n := fs.Int("n", 1000000, "entries to import")
	_ = fs.Parse(args)
	outbox, err := st.open(ctx)
	if err != nil {
		return err
	}
	defer outbox.Close()
	return fillAndReport(ctx, st.backend, outbox, *n)
}

func fillAndReport(ctx context.Context, backend string, outbox backends.Outbox, n int) error {
	r, err := fill(ctx, outbox, n, time.Now().UTC())
	if err != nil {
		return err
	}
	total := r.prepare + r.store
	fmt.Printf("suppression import (%s): %d entries in %s = %.0f entries/s (PrepareImport %s, ImportSuppressions %s)\n",
		backend, n, fmtDur(total), float64(n)/total.Seconds(), fmtDur(r.prepare), fmtDur(r.store))
	return nil
}

func (o *lookupOptions) register(fs *flag.FlagSet, n string) {
	fs.IntVar(&o.n, n, 20000, "lookups to time")
	fs.IntVar(&o.rcpts, "rcpts", 5, "recipients in each lookup")
	fs.Float64Var(&o.hits, "hits", 0.2, "share of the lookups with one listed recipient among the others")
}

func (o lookupOptions) check() error {
	if o.n < 1 || o.rcpts < 1 || o.hits < 0 || o.hits > 1 {
		return fmt.Errorf("the lookups and -rcpts must be 1 or more, -hits between 0 and 1")
	}
	return nil
}

func lookupCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("lookup", flag.ExitOnError)
	var st storeFlags
	st.register(fs)
	var o lookupOptions
	o.register(fs, "n")
	fs.IntVar(&o.entries, "entries", 0, "entries fill made (default: the active entries the list counts)")
	_ = fs.Parse(args)
	if err := o.check(); err != nil {
		return err
	}
	outbox, err := st.open(ctx)
	if err != nil {
		return err
	}
	defer outbox.Close()
	if o.entries == 0 {
		counts, err := outbox.SuppressionCounts(ctx)
		if err != nil {
			return err
		}
		for _, c := range counts {
			o.entries += c
		}
	}
	if o.hits > 0 && o.entries == 0 {
		return fmt.Errorf("the list is empty: run suppress fill first, or give -hits 0")
	}
	return lookupAndReport(ctx, st.backend, outbox, o)
}

func lookupAndReport(ctx context.Context, backend string, outbox backends.Outbox, o lookupOptions) error {
	r, err := lookups(ctx, outbox, o)
	if err != nil {
		return err
	}
	p := r.percentiles()
	fmt.Printf("suppression lookup (%s, %d entries, %d recipients each, %d lookups, %d found entries): p50 %s p90 %s p99 %s max %s; %.0f lookups/s\n",
		backend, o.entries, o.rcpts, len(r.took), r.found, fmtDur(p.p50), fmtDur(p.p90), fmtDur(p.p99), fmtDur(p.max),
		float64(len(r.took))/r.elapsed.Seconds())
	return nil
}

// benchCmd fills a fresh outbox and times the lookups on it.
func benchCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	var st storeFlags
	fs.StringVar(&st.backend, "backend", "bolt", "outbox `store`: bolt, mysql or postgres")
	server := fs.String("server", "", "the MySQL or PostgreSQL server's `DSN`, on which a fresh database is made (default: TEST_POSTINO_MYSQL_DSN or TEST_POSTINO_POSTGRES_DSN)")
	n := fs.Int("n", 1000000, "entries to import")
	var o lookupOptions
	o.register(fs, "lookups")
	_ = fs.Parse(args)
	if err := o.check(); err != nil {
		return err
	}
	o.entries = *n
	switch st.backend {
	case "mysql":
		st.dsn = cmp.Or(*server, os.Getenv("TEST_POSTINO_MYSQL_DSN"), "root@tcp(127.0.0.1:3306)/")
	case "postgres":
		st.dsn = cmp.Or(*server, os.Getenv("TEST_POSTINO_POSTGRES_DSN"), "postgres://root@127.0.0.1:5432/test")
	}
	dir, err := os.MkdirTemp("", "postino-suppress.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st.path = filepath.Join(dir, "outbox.db")
	cfg, err := st.config()
	if err != nil {
		return err
	}
	drop, err := cfg.CreateOutbox(ctx, fmt.Sprintf("postino_suppress_%d", os.Getpid()))
	if err != nil {
		return err
	}
	defer func() {
		if err := drop(); err != nil {
			log.Printf("suppress bench: drop the outbox: %v", err)
		}
	}()
	outbox, err := cfg.OpenOutbox(ctx)
	if err != nil {
		return err
	}
	defer outbox.Close()
	if err := fillAndReport(ctx, st.backend, outbox, *n); err != nil {
		return err
	}
	return lookupAndReport(ctx, st.backend, outbox, o)
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0f us", float64(d)/float64(time.Microsecond))
}
