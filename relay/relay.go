// Package relay wires the relay together: configuration, spool, outbox,
// SMTP intake, workers, housekeeping and the admin API.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/postgres"
	"github.com/genropy/postino/internal/journal"
	"github.com/genropy/postino/plugins"
	"github.com/genropy/postino/relay/admin"
	"github.com/genropy/postino/relay/bounce"
	"github.com/genropy/postino/relay/brake"
	"github.com/genropy/postino/relay/delivery"
	"github.com/genropy/postino/relay/dkim"
	"github.com/genropy/postino/relay/intake"
	"github.com/genropy/postino/relay/mailbox"
	"github.com/genropy/postino/relay/pec"
	"github.com/genropy/postino/relay/submissions"
	"github.com/genropy/postino/relay/suppression"
	"github.com/genropy/postino/relay/tlsrpt"
	"github.com/genropy/postino/spool"
)

// Relay is one running relay.
type Relay struct {
	cfg Config
	log *slog.Logger

	spool *spool.Spool
	// space says whether the spool can take mail; nil when the outbox
	// keeps messages' bytes.
	space *spaceWatch
	// bodies opens messages' bytes, in the spool or the
	// outbox, as each row's path says.
	bodies *spool.Bodies
	outbox backends.Outbox
	// outcomes keeps the delivery outcomes the outbox failed to take.
	outcomes *journal.Journal
	// exclusive is true when no other process can use the outbox (bbolt's
	// file lock): then at start every lease belongs to a dead process.
	exclusive bool
	// started is when this run began: the start-up sweep leaves what is
	// newer alone.
	started time.Time

	intake     *intake.Server
	worker     *intake.Worker
	engine     *delivery.Engine
	dispatcher *plugins.Dispatcher
	signer     *dkim.Signer
	pollers    []*mailbox.Poller
	// submissions read the apps' submissions tables into intake.
	submissions []*submissions.Reader
	// policy applies the suppression list; unsubscribes honours the
	// one-click unsubscribes (nil without unsubscribe settings), served
	// by unsub on unsubLn; brake stops the batches whose lists are bad.
	policy       *suppression.Policy
	unsubscribes *unsubscribes
	unsub        *http.Server
	unsubLn      net.Listener
	brake        *brake.Brake
	// tally counts the MX sessions' TLS results, and reporter sends the
	// TLS reports (nil without delivery.tls.reports).
	tally    *tlsrpt.Tally
	reporter *tlsrpt.Reporter
	// pecRecorder is nil when no PEC account is configured.
	pecRecorder *pec.Recorder
	admin       *http.Server
	smtpLn      net.Listener
	adminLn     net.Listener
}

// New opens the spool and outbox, returns the leases a dead process held,
// and binds the listeners. Run serves, and sweeps in the background what
// else a crash may have left.
func New(cfg Config, log *slog.Logger) (_ *Relay, err error) {
	if err := cfg.Validate(os.Getenv); err != nil {
		return nil, err
	}
	logServiceLinks(log, cfg.ServiceLinks)
	cfg = cfg.Effective(os.Getenv)
	r := &Relay{cfg: cfg, log: log, started: time.Now().UTC()}
	defer func() {
		if err != nil {
			r.close()
		}
	}()

	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	if r.spool, err = spool.Open(cfg.spoolDir()); err != nil {
		return nil, err
	}
	kind, _ := cfg.store()
	r.exclusive = kind.exclusive
	if r.outbox, err = cfg.OpenOutbox(context.Background()); err != nil {
		return nil, err
	}
	store, err := keptInOutbox(cfg, r.outbox)
	if err != nil {
		return nil, err
	}
	r.bodies = spool.NewBodies(r.spool, store)

	// Before the restore: the outcomes the previous run reached land while
	// their messages are still held under its leases.
	if err := r.replayOutcomes(); err != nil {
		return nil, err
	}
	if err := r.recover(context.Background()); err != nil {
		return nil, err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newQueueCollector(r.outbox), newSuppressionCollector(r.outbox), prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "postino_spool_unreadable_total",
			Help: "Times a message's file could not be read (missing, I/O error); the message waits and is tried again."},
			func() float64 { n, _ := r.spool.Unreadable(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "postino_outcomes_kept",
			Help: "Delivery outcomes the outbox failed to take, kept in the outcome journal and written again until they land."},
			func() float64 { return float64(r.outcomes.Len()) }))
	im, dm, bm := intake.NewMetrics(reg), delivery.NewMetrics(reg), bounce.NewMetrics(reg)
	token, err := cfg.Admin.Token(os.Getenv)
	if err != nil {
		return nil, err
	}

	icfg, err := cfg.intakeConfig(os.Getenv)
	if err != nil {
		return nil, err
	}
	if !icfg.StoreBodies {
		r.space = newSpaceWatch(r.spool.Dir(), cfg.minFreeSpace(), log)
		icfg.Space = r.space
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "postino_spool_full",
			Help: "1 while the spool's file system cannot take mail (under spool.min_free_space, or a write failed for want of space): MAIL is answered 452 4.3.1 and /readyz is not ready."},
			func() float64 { return float64(btoi(r.space.Full() != nil)) }))
	}
	routes, err := cfg.deliveryRoutes(os.Getenv)
	if err != nil {
		return nil, err
	}
	ring, err := cfg.DKIM.Keyring()
	if err != nil {
		return nil, err
	}
	r.signer = dkim.NewSigner(ring, dkim.NewMetrics(reg))
	logKeys(log, ring)
	specs := cfg.pluginSpecs()
	r.dispatcher = plugins.NewDispatcher(cfg.dispatcherConfig(), r.outbox, specs, log, plugins.NewMetrics(reg))
	res := cfg.resolver()
	dcfg, err := r.deliveryConfig(res, len(specs) > 0)
	if err != nil {
		return nil, err
	}
	if err := r.actOnFindings(routes, reg, &icfg, &dcfg); err != nil {
		return nil, err
	}
	r.engine = delivery.NewEngine(dcfg, r.outbox, r.bodies, routes, res, log, dm, r.dispatcher)
	r.worker = intake.NewWorker(cfg.workerConfig(r.engine, r.policy, r.brake), r.outbox, r.bodies, routes.Choose, log)
	r.intake = intake.NewServer(icfg, r.outbox, r.spool, log, im, r.worker)
	if r.submissions, err = cfg.openSubmissions(r.intake, submissions.NewMetrics(reg), os.Getenv, log); err != nil {
		return nil, err
	}

	r.admin = &http.Server{
		Handler: admin.NewHandler(r.outbox, admin.Options{
			Metrics:    promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
			Ready:      r.ready,
			Degraded:   r.degraded,
			Wake:       r.worker.Wake,
			WakeEvents: r.dispatcher.Wake,
			Receipts:   r.bodies,
			Token:      token,
			Profiling:  cfg.Admin.Profiling,
			Thresholds: cfg.Brake.adminThresholds(),
			Policy:     r.policy,
			Sites:      r.engine,
			Log:        log,
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	if err := r.listen(); err != nil {
		return nil, err
	}
	r.tlsReports(res, dcfg.TLSPolicies)
	// Last: the mailbox leases name the relay by its SMTP address.
	mm := mailbox.NewMetrics(reg)
	if err := r.bounceMailboxes(bm, mm, r.dispatcher.Wake); err != nil {
		return nil, err
	}
	if err := r.pecMailboxes(reg, mm, r.dispatcher.Wake); err != nil {
		return nil, err
	}
	return r, nil
}

// deliveryConfig is the delivery engine's settings, with what the relay
// has opened for it: the signer, the outcome journal, the outbox's lease
// rows, the TLS policies over the resolver res.
func (r *Relay) deliveryConfig(res delivery.Resolver, hasPlugins bool) (delivery.Config, error) {
	cfg := r.cfg
	dcfg := cfg.deliveryConfig()
	var err error
	if dcfg.Sites, err = cfg.Delivery.Sites.rules(cfg.Delivery.MXConnections); err != nil {
		return dcfg, err
	}
	if dcfg.TLSPolicies, err = r.mxTLS(res); err != nil {
		return dcfg, err
	}
	// Without plugins, outcomes are acknowledged in the commit that records
	// them: nobody is waiting to be told.
	dcfg.Acknowledge = !hasPlugins
	dcfg.Signer = r.signer
	dcfg.Outcomes = r.outcomes
	// Operators' site suspensions are kept in the outbox; its other
	// relays, when it can have any, share each site's sessions and rates.
	dcfg.Leases, dcfg.Fleet = r.outbox, !r.exclusive
	return dcfg, nil
}

// replayOutcomes opens the outcome journal and writes what the previous
// run kept in it.
func (r *Relay) replayOutcomes() (err error) {
	if r.outcomes, err = journal.Open(r.cfg.journalPath(), r.outbox, journal.Options{Retry: outcomeRetry, Log: r.log}); err != nil {
		return err
	}
	n, err := r.outcomes.Replay(context.Background())
	if err != nil {
		return fmt.Errorf("start-up: the outcomes the previous run reached are not in the outbox yet; the relay starts once they are: %w", err)
	}
	if n > 0 {
		r.log.Info("start-up: wrote the outcomes the previous run kept", "count", n)
	}
	return nil
}

// actOnFindings makes what acts on what the relay learns of addresses and
// batches (the suppression policy, the unsubscribes, the brake), and wires
// it into intake's and delivery's settings.
func (r *Relay) actOnFindings(routes *delivery.Routes, reg prometheus.Registerer, icfg *intake.Config, dcfg *delivery.Config) (err error) {
	pc := r.cfg.suppressionPolicy(routes, r.cfg.Hostname)
	pc.Held = suppression.NewHeldCounter(reg)
	r.policy = suppression.New(pc, r.outbox)
	icfg.Suppression = r.policy
	dcfg.Holds, dcfg.Findings = r.policy, r.policy
	if r.unsubscribes, err = r.cfg.newUnsubscribes(r.policy, r.outbox, r.dispatcher.Wake, reg, r.log); err != nil {
		return err
	}
	if r.unsubscribes != nil {
		dcfg.Unsubscribes = r.unsubscribes
	}
	r.brake = brake.New(r.cfg.Brake.thresholds(), r.outbox, r.log, r.dispatcher.Wake, reg)
	dcfg.Brake = r.brake
	r.unsub, err = r.unsubscribes.server(&r.cfg, r.log)
	return err
}

// listen binds the SMTP and admin listeners.
func (r *Relay) listen() (err error) {
	// No TCP keepalive: the read timeout ends idle sessions, and the
	// keepalive options cost four system calls per connection.
	lc := net.ListenConfig{KeepAlive: -1}
	if r.smtpLn, err = lc.Listen(context.Background(), "tcp", r.cfg.SMTP.Listen); err != nil {
		return fmt.Errorf("smtp.listen: %w", err)
	}
	if r.adminLn, err = net.Listen("tcp", r.cfg.Admin.Listen); err != nil {
		return fmt.Errorf("admin.listen: %w", err)
	}
	if r.unsub != nil {
		if r.unsubLn, err = net.Listen("tcp", r.cfg.Unsubscribe.Listen); err != nil {
			return fmt.Errorf("unsubscribe.listen: %w", err)
		}
	}
	return nil
}

// UnsubscribeAddr is the address the unsubscribe listener is bound to;
// nil without one.
func (r *Relay) UnsubscribeAddr() net.Addr {
	if r.unsubLn == nil {
		return nil
	}
	return r.unsubLn.Addr()
}

// keptInOutbox returns the outbox when it keeps messages' bytes and their
// receipts, nil otherwise. Whatever this relay writes, it reads what
// another relay kept in the outbox when the store keeps any.
func keptInOutbox(cfg Config, o backends.Outbox) (spool.Store, error) {
	store, keeps := o.(spool.Store)
	if cfg.Spool.Store == SpoolOutbox && !keeps {
		return nil, fmt.Errorf("spool.store outbox: the %s outbox does not keep message bytes yet; use spool.store shared", cfg.Outbox.Backend)
	}
	return store, nil
}

// ReloadDKIM puts the DKIM policy and keys of c in force for the messages
// signed from now on. When a key file cannot be read or parsed nothing
// changes, and the error names the file.
func (r *Relay) ReloadDKIM(c DKIMConfig) error {
	ring, err := c.Keyring()
	if err != nil {
		return fmt.Errorf("DKIM keys not reloaded, those in use stay: %w", err)
	}
	r.signer.Swap(ring)
	logKeys(r.log, ring)
	return nil
}

// logKeys says which keys sign, so that an operator sees a rotation land.
func logKeys(log *slog.Logger, ring *dkim.Keyring) {
	for _, k := range ring.Keys() {
		log.Info("DKIM key", "domain", k.Domain, "selector", k.Selector, "algorithm", k.Algorithm(), "active", k.Active, "file", k.File)
	}
}

// listener is a store that tells when another relay sharing it made work
// due (PostgreSQL's LISTEN/NOTIFY), so that the workers start at once
// rather than at their next poll.
type listener interface {
	Listen(ctx context.Context, log *slog.Logger, wake func(channel string))
}

// wake wakes the worker whose work a store's notification says is due.
func (r *Relay) wake(channel string) {
	switch channel {
	case postgres.ChannelAccepted:
		r.worker.Wake()
	case postgres.ChannelReady:
		r.engine.Wake()
	case postgres.ChannelEvents:
		r.dispatcher.Wake()
	}
}

// SMTPAddr is the address the SMTP listener is bound to.
func (r *Relay) SMTPAddr() net.Addr { return r.smtpLn.Addr() }

// AdminAddr is the address the admin API is bound to.
func (r *Relay) AdminAddr() net.Addr { return r.adminLn.Addr() }

// Run serves until ctx ends, then stops: no new connections, sessions in
// progress get ShutdownTimeout to finish, workers finish what they hold.
func (r *Relay) Run(ctx context.Context) error {
	r.log.Info("postino serving", "smtp", r.smtpLn.Addr().String(), "admin", r.adminLn.Addr().String(),
		"data", r.cfg.DataDir, "outbox", r.cfg.Outbox.Backend, "spool_store", r.cfg.Spool.Store, "host", r.cfg.Hostname)
	if r.cfg.deliversToMX() && !qualified(r.cfg.Hostname) {
		r.log.Warn("hostname is not a fully qualified domain name, and mail goes straight to the recipients' MX hosts, "+
			"which refuse or junk mail from a HELO name that does not resolve: set hostname to the relay's own name "+
			"(relay.example.com), whose address has a PTR record naming it back, or give the default route a smarthost",
			"hostname", r.cfg.Hostname)
	}
	errc := make(chan error, 3)
	go func() { errc <- r.intake.Serve(r.smtpLn) }()
	for _, hs := range []struct {
		srv *http.Server
		ln  net.Listener
	}{{r.admin, r.adminLn}, {r.unsub, r.unsubLn}} {
		if hs.srv == nil {
			continue
		}
		go func() {
			err := hs.srv.Serve(hs.ln)
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			errc <- err
		}()
	}
	workCtx, stopWork := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.worker.Run(workCtx) })
	if l, ok := r.outbox.(listener); ok {
		wg.Go(func() { l.Listen(workCtx, r.log, r.wake) })
	}
	for _, rd := range r.submissions {
		wg.Go(func() { rd.Run(workCtx) })
	}
	wg.Go(func() { r.housekeeping(workCtx) })
	// The brake counts until delivery and the mailboxes have stopped: it
	// flushes what they counted last.
	brakeCtx, stopBrake := context.WithCancel(context.Background())
	var braking sync.WaitGroup
	braking.Go(func() { r.brake.Run(brakeCtx, time.Second) })
	if r.tally != nil {
		braking.Go(func() { r.tally.Run(brakeCtx, tlsrptFlush) })
		wg.Go(func() { r.reporter.Run(workCtx, r.cfg.Delivery.TLS.Reports.reportCheck()) })
	}
	wg.Go(func() { r.sweep(workCtx) })
	if r.pecRecorder != nil {
		wg.Go(func() { r.watchOverdue(workCtx) })
	}
	deliveryCtx, stopDelivery := context.WithCancel(context.Background())
	delivered := make(chan struct{})
	go func() {
		defer close(delivered)
		var outcomes sync.WaitGroup
		outcomes.Go(func() { r.outcomes.Run(deliveryCtx) })
		defer outcomes.Wait()
		if r.cfg.Delivery.Paused {
			r.log.Warn("delivery is paused (delivery.paused): messages wait in READY")
			<-deliveryCtx.Done()
			return
		}
		r.engine.Run(deliveryCtx)
	}()
	callbackCtx, stopCallbacks := context.WithCancel(context.Background())
	var callbacks sync.WaitGroup
	callbacks.Go(func() { r.dispatcher.Run(callbackCtx) })
	r.runPollers(callbackCtx, &callbacks)

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		err = fmt.Errorf("listener stopped: %w", err)
	}
	r.log.Info("postino stopping")
	// First no new mail; then deliveries finish (or are handed back within
	// delivery.shutdown_timeout); the outcomes they reached get their
	// callbacks while the API still answers.
	intakeCtx, cancelIntake := context.WithTimeout(context.Background(), min(10*time.Second, r.cfg.Delivery.ShutdownTimeout.D()))
	r.intake.Shutdown(intakeCtx)
	cancelIntake()
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stopWork()
	wg.Wait()
	stopDelivery()
	<-delivered
	stopCallbacks()
	callbacks.Wait()
	stopBrake()
	braking.Wait()
	r.admin.Shutdown(shutCtx)
	if r.unsub != nil {
		r.unsub.Shutdown(shutCtx)
	}
	r.close()
	r.log.Info("postino stopped")
	return err
}

func (r *Relay) close() {
	if r.smtpLn != nil {
		r.smtpLn.Close()
	}
	if r.adminLn != nil {
		r.adminLn.Close()
	}
	if r.spool != nil {
		r.spool.Close()
	}
	closeAll(r.submissions)
	if r.outcomes != nil {
		r.outcomes.Close()
	}
	if r.policy != nil {
		r.policy.Close()
	}
	if r.outbox != nil {
		r.outbox.Close()
	}
}

func (r *Relay) ready(ctx context.Context) map[string]error {
	checks := map[string]error{"outbox": r.outbox.Ping(ctx)}
	if _, err := os.Stat(r.spool.Dir()); err != nil {
		checks["spool"] = err
	} else {
		checks["spool"] = nil
	}
	if r.space != nil {
		checks["spool space"] = r.space.Full()
	}
	return checks
}

// Version is the relay's version, from the build.
func Version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return "dev-" + s.Value[:12]
		}
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	return "dev"
}
