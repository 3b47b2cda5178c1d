package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/delivery"
)

func serve(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	configPath := configFlag(fs, "")
	listen := fs.String("listen", "", "SMTP listen `address`, host:port (POSTINO_LISTEN)")
	adminAddr := fs.String("admin", "", "admin API listen `address`, host:port (POSTINO_ADMIN)")
	data := fs.String("data", "", "data `directory` for the spool and outbox.db (POSTINO_DATA)")
	smarthost := fs.String("smarthost", "", "deliver through this smarthost, `host:port`, instead of to MX hosts (POSTINO_SMARTHOST)")
	smarthostTLS := fs.String("smarthost-tls", "", "TLS `mode` with the smarthost: "+delivery.TLSModeList()+" (POSTINO_SMARTHOST_TLS)")
	backend := fs.String("backend", "", "outbox `store`: bolt (default), mysql, postgres or dynamodb (POSTINO_BACKEND)")
	dsn := fs.String("dsn", "", "MySQL or PostgreSQL `DSN`; implies --backend mysql, or postgres for a postgres:// URL "+
		"(POSTINO_OUTBOX_MYSQL_DSN, POSTINO_OUTBOX_POSTGRES_DSN)")
	spoolStore := fs.String("spool-store", "", "where message bytes live, the spool `store`: local (default), shared or outbox (POSTINO_SPOOL_STORE)")
	table := fs.String("table", "", "DynamoDB `table`; implies --backend dynamodb (EMAIL_OUTBOX_TABLE)")
	var pluginPaths []string
	fs.Func("plugin", "run the status-callback plugin at `path`, with default settings (repeatable)", func(p string) error {
		pluginPaths = append(pluginPaths, p)
		return nil
	})
	dkimKeys := dkimFlag(fs)
	if _, err := inv.parseArgs(fs); err != nil {
		return err
	}
	// The configuration is built again on SIGHUP, from the same sources.
	load := func() (relay.Config, error) {
		cfg, err := relay.LoadConfig(*configPath, os.Environ())
		if err != nil {
			return cfg, err
		}
		cfg.DKIM.Keys = append(cfg.DKIM.Keys, *dkimKeys...)
		return cfg, nil
	}
	cfg, err := load()
	if err != nil {
		return err
	}
	for _, f := range []struct {
		val string
		dst *string
	}{{*listen, &cfg.SMTP.Listen}, {*adminAddr, &cfg.Admin.Listen}, {*data, &cfg.DataDir},
		{*smarthost, &cfg.Routes.Default.Smarthost}, {*smarthostTLS, &cfg.Routes.Default.TLS},
		{*backend, &cfg.Outbox.Backend}, {*table, &cfg.Outbox.DynamoDB.Table}, {*spoolStore, &cfg.Spool.Store}} {
		if f.val != "" {
			*f.dst = f.val
		}
	}
	if *dsn != "" {
		if *backend == "" {
			cfg.Outbox.Backend = relay.DSNStore(*dsn)
		}
		cfg.SetDSN(*dsn)
	}
	if *table != "" && *backend == "" {
		cfg.Outbox.Backend = "dynamodb"
	}
	for _, p := range pluginPaths {
		cfg.Plugins = append(cfg.Plugins, relay.DefaultPlugin(p))
	}
	log, err := newLogger(cfg.Log, inv.stderr)
	if err != nil {
		return err
	}
	tuneGC()
	r, err := relay.New(cfg, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				reload(r, load, log)
			}
		}
	}()
	return r.Run(ctx)
}

// reload applies what SIGHUP reloads: the DKIM policy and keys. Anything
// wrong leaves the keys in use as they are.
func reload(r *relay.Relay, load func() (relay.Config, error), log *slog.Logger) {
	cfg, err := load()
	if err == nil {
		err = r.ReloadDKIM(cfg.DKIM)
	}
	if err != nil {
		log.Error("SIGHUP: reload failed; the DKIM keys in use stay", "error", err)
		return
	}
	log.Info("SIGHUP: DKIM keys reloaded")
}

// dkimFlag adds --dkim DOMAIN=SELECTOR:KEYFILE (repeatable): an active key.
func dkimFlag(fs *flag.FlagSet) *[]relay.DKIMKey {
	var keys []relay.DKIMKey
	fs.Func("dkim", "sign mail of `DOMAIN=SELECTOR:KEYFILE` with that key (repeatable)", func(v string) error {
		domain, rest, ok1 := strings.Cut(v, "=")
		selector, file, ok2 := strings.Cut(rest, ":")
		if !ok1 || !ok2 || domain == "" || selector == "" || file == "" {
			return fmt.Errorf("%q: give DOMAIN=SELECTOR:KEYFILE, for example example.com=s2026:/etc/postino/dkim/example.com.s2026.pem", v)
		}
		keys = append(keys, relay.DKIMKey{Domain: domain, Selector: selector, KeyFile: file})
		return nil
	})
	return &keys
}

func newLogger(c relay.LogConfig, w io.Writer) (*slog.Logger, error) {
	level, err := c.SlogLevel()
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	if strings.EqualFold(c.Format, "json") {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

// tuneGC trades memory for CPU: the relay's live heap is small (message
// content streams from the spool, never whole in memory), so collecting at
// four times it instead of twice costs little memory and spares the CPU
// that collections take from moving mail. A soft limit keeps the heap from
// growing past what a sidecar may use. GOGC and GOMEMLIMIT still win.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(128 << 20)
	}
}
