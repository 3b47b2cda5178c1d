package relay

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/backoff"
	"github.com/genropy/postino/plugins"
	"github.com/genropy/postino/relay/delivery"
	"github.com/genropy/postino/relay/dkim"
	"github.com/genropy/postino/relay/intake"
	"github.com/genropy/postino/relay/mailbox"
	"github.com/genropy/postino/relay/pec"
	"github.com/genropy/postino/relay/resolver"
)

// This file turns a checked Config into each package's own settings. The
// constants are settings the configuration does not offer.
const (
	// fallbackHostname names the relay when neither hostname nor the
	// machine gives one: HELO and generated Message-IDs need a name, and
	// this one claims no domain.
	fallbackHostname = "localhost"
	// commitTimeout bounds the outbox calls that answer one message's DATA:
	// the client waits for the reply up to RFC 5321's ten minutes, and a
	// store slower than this is failing; the client is told to try again.
	commitTimeout = 30 * time.Second
	// dispatcherConcurrency is how many events are claimed and called at
	// once: enough to keep plugins that wait on the network (webhooks) busy,
	// few enough that one claim stays a short read of the outbox.
	dispatcherConcurrency = 64
	// dispatcherPoll is how late the dispatcher finds events nothing woke it
	// for: retries coming due, events another relay sharing the outbox
	// wrote, a plugin to start again.
	dispatcherPoll = time.Second
	// mailboxLease is how long a relay holds a mailbox; it renews at half,
	// so a relay that died leaves its mailboxes to another within it.
	mailboxLease = 2 * time.Minute
	// callbackLease is how long the events the dispatcher claims (and their
	// messages, CALLING-*) stay calling without a sign of life. The
	// dispatcher renews them every third of it however long the plugins
	// take, so it is as short as delivery.lease's default: a dead relay's
	// events are restored within a lease and a restore period (the
	// housekeeping's, a quarter of intake.lease) and claimed again within a
	// poll, 76 seconds with the defaults; a store that misses one renewal
	// still leaves the next one time to land.
	callbackLease = time.Minute
)

// outcomeRetry spaces the writes of an outcome the outbox failed: soon
// enough to land well within the message's lease.
var outcomeRetry = backoff.Schedule{First: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2}

// hostname is the name the relay goes by: the configured one, else the
// machine's.
func hostname(configured string) string {
	if configured != "" {
		return configured
	}
	if h, _ := os.Hostname(); h != "" {
		return h
	}
	return fallbackHostname
}

// deliversToMX reports whether a route delivers to the recipients' MX hosts
// itself: the default route or a sender route without a smarthost.
func (c *Config) deliversToMX() bool {
	if c.Routes.Default.Smarthost == "" {
		return true
	}
	for _, rc := range c.Routes.Senders {
		if rc.Smarthost == "" {
			return true
		}
	}
	return false
}

// qualified reports whether name may be a fully qualified domain name: it
// has a dot, and is not localhost.
func qualified(name string) bool {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	return strings.Contains(name, ".") && name != "localhost" && !strings.HasPrefix(name, "localhost.")
}

// intakeConfig is the SMTP server's settings; it reads the AUTH passwords
// and the TLS key pair.
func (c *Config) intakeConfig(getenv func(string) string) (intake.Config, error) {
	nets, err := c.SMTP.allowNetworks()
	if err != nil {
		return intake.Config{}, err
	}
	accounts, err := c.accounts(getenv)
	if err != nil {
		return intake.Config{}, err
	}
	var tlsCfg *tls.Config
	if c.SMTP.TLS.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.SMTP.TLS.CertFile, c.SMTP.TLS.KeyFile)
		if err != nil {
			return intake.Config{}, fmt.Errorf("smtp.tls: %w", err)
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	return intake.Config{
		Hostname:           c.Hostname,
		MaxMessageSize:     int64(c.SMTP.MaxMessageSize),
		MaxRecipients:      c.SMTP.MaxRecipients,
		MaxLineLength:      int(min(c.SMTP.MaxLineLength, c.SMTP.MaxMessageSize)),
		RejectBareNewlines: c.SMTP.BareNewlines == "reject",
		AllowNetworks:      nets,
		Accounts:           accounts,
		AuthLimits:         c.SMTP.Auth.Limits.intake(),
		AllowInsecureAuth:  c.SMTP.Auth.AllowInsecure,
		TLS:                tlsCfg,
		ReadTimeout:        c.SMTP.ReadTimeout.D(),
		WriteTimeout:       c.SMTP.WriteTimeout.D(),
		CommitTimeout:      commitTimeout,
		PEC:                c.PEC.intakeAccounts(),
		StoreBodies:        c.Spool.Store == SpoolOutbox,

		MaxSessions:          c.SMTP.MaxSessions,
		MaxSessionsPerClient: c.SMTP.MaxSessionsPerClient,
		ReservedSessions:     c.SMTP.ReservedSessions,
		TransactionTimeout:   c.SMTP.TransactionTimeout.D(),
		MinDataRate:          int64(c.SMTP.MinDataRate),
	}, nil
}

// accounts reads the AUTH passwords from their files and variables.
func (c *Config) accounts(getenv func(string) string) (map[string]string, error) {
	if len(c.SMTP.Auth.Accounts) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(c.SMTP.Auth.Accounts))
	for _, a := range c.SMTP.Auth.Accounts {
		pw, err := secret(a.PasswordFile, a.PasswordEnv, getenv)
		if err != nil {
			return nil, fmt.Errorf("smtp.auth account %q: %w", a.Username, err)
		}
		out[a.Username] = pw
	}
	return out, nil
}

// intakeAccounts are the PEC accounts as intake checks them.
func (p *PECConfig) intakeAccounts() map[string]intake.PECAccount {
	out := map[string]intake.PECAccount{}
	for _, a := range p.Accounts {
		receipt, _ := intake.ParsePECReceipt(a.Receipt) // checked by Check
		out[strings.ToLower(a.Address)] = intake.PECAccount{Address: a.Address, Receipt: receipt}
	}
	return out
}

// workerConfig is the intake workers' settings: the messages they make
// READY go to delivery, woken for a claim or taken straight away. The
// relay stops its intake worker before the engine, as Reserve needs.
func (c *Config) workerConfig(engine *delivery.Engine, holds intake.Holder, batches intake.Counter) intake.WorkerConfig {
	return intake.WorkerConfig{Concurrency: c.Intake.Workers, Lease: c.Intake.Lease.D(), Poll: c.Intake.Poll.D(),
		Owner: c.Hostname, Delivery: engine, MaxAge: c.Delivery.Retry.MaxAge.D(), Holds: holds, Batches: batches}
}

// deliveryRoutes builds the routes and their rules, reading the passwords.
func (c *Config) deliveryRoutes(getenv func(string) string) (*delivery.Routes, error) {
	var routes []delivery.Route
	var rules []delivery.Rule
	build := func(rc RouteConfig, name string) (delivery.Route, error) {
		rc = rc.withDefaults(name)
		r := delivery.Route{Name: name, Smarthost: rc.Smarthost, TLS: rc.TLS, SkipVerify: rc.TLSSkipVerify,
			CAFile: rc.TLSCAFile, Username: rc.Username, MaxConnections: rc.MaxConnections, Rate: rc.Rate,
			MXPort: c.Delivery.MXPort, BounceAddress: rc.BounceAddress, DKIMDomain: rc.DKIMDomain}
		if rc.Username != "" {
			pw, err := secret(rc.PasswordFile, rc.PasswordEnv, getenv)
			if err != nil {
				return r, fmt.Errorf("route %s: password of %s: %w", name, rc.Username, err)
			}
			r.Password = pw
		}
		return r, nil
	}
	def, err := build(c.Routes.Default, delivery.DefaultRoute)
	if err != nil {
		return nil, err
	}
	routes = append(routes, def)
	// PEC accounts first: their mail must leave through the account.
	for _, a := range c.PEC.Accounts {
		name := pecRouteName(a.Address)
		r, err := build(RouteConfig{Smarthost: a.SMTP, TLS: "tls", TLSCAFile: a.TLSCAFile, Username: a.username(),
			PasswordFile: a.PasswordFile, PasswordEnv: a.PasswordEnv, MaxConnections: 5}, name)
		if err != nil {
			return nil, err
		}
		r.ReceiptsWithin = c.PEC.AcceptanceTimeout.D()
		routes = append(routes, r)
		rules = append(rules, delivery.Rule{Sender: a.Address, Route: name}, delivery.Rule{AuthUser: a.Address, Route: name})
	}
	for i, rc := range c.Routes.Senders {
		name := senderRouteName(rc, i)
		r, err := build(rc, name)
		if err != nil {
			return nil, err
		}
		routes = append(routes, r)
		rules = append(rules, delivery.Rule{Sender: rc.Match.Sender, Domain: rc.Match.Domain, AuthUser: rc.Match.AuthUser, Route: name})
	}
	rs, err := delivery.NewRoutes(routes, rules)
	if err != nil {
		return nil, fmt.Errorf("routes: %w", err)
	}
	return rs, nil
}

// pecRouteName names the delivery route of a PEC account.
func pecRouteName(address string) string { return backends.PECRoutePrefix + strings.ToLower(address) }

// username is the login at the provider.
func (a PECAccountConfig) username() string {
	if a.Username != "" {
		return a.Username
	}
	return a.Address
}

// deliveryConfig is the engine's settings; the signer and whether outcomes
// are acknowledged at once are the relay's to add.
func (c *Config) deliveryConfig() delivery.Config {
	d := c.Delivery
	return delivery.Config{
		MaxInFlight: d.MaxInFlight, Lease: d.Lease.D(), Poll: d.Poll.D(), IdleTimeout: d.IdleTimeout.D(),
		ShutdownTimeout: d.ShutdownTimeout.D(), MXConnections: d.MXConnections, DownAfter: d.RouteDownAfter, ConfirmAfter: d.DNS.ConfirmAfter.D(),
		Timeouts: delivery.Timeouts{Connect: d.Timeouts.Connect.D(), Greeting: d.Timeouts.Greeting.D(),
			Command: d.Timeouts.Command.D(), DataInit: d.Timeouts.DataInit.D(),
			DataBlock: d.Timeouts.DataBlock.D(), DataEnd: d.Timeouts.DataEnd.D()},
		Retry:    delivery.Retry{Schedule: backoff.Schedule{First: d.Retry.First.D(), Max: d.Retry.Max.D(), Jitter: d.Retry.Jitter}, MaxAge: d.Retry.MaxAge.D()},
		HeloName: c.Hostname, Owner: c.Hostname, SiteMetrics: d.Sites.Metrics,
	}
}

// tlsPolicies are MX delivery's TLS policies by recipient domain.
func (c *Config) tlsPolicies(func(string) string) (*delivery.TLSPolicies, error) {
	return delivery.NewTLSPolicies(c.Delivery.TLS.Policies, c.Delivery.TLS.Roots)
}

// resolver answers the DNS questions of MX delivery: the servers listed,
// or the system's.
func (c *Config) resolver() delivery.Resolver {
	d := c.Delivery.DNS
	if len(d.Servers) == 0 {
		return net.DefaultResolver
	}
	return resolver.New(d.Servers, resolver.Options{Timeout: d.Timeout.D(), Validating: d.Validating})
}

// dispatcherConfig is the plugins dispatcher's settings.
func (c *Config) dispatcherConfig() plugins.Config {
	return plugins.Config{Poll: dispatcherPoll, Lease: callbackLease, Owner: c.Hostname,
		Concurrency: dispatcherConcurrency, Version: Version()}
}

// pluginSpecs turns the configuration into what the dispatcher runs; a
// plugin's unset settings take the defaults.
func (c *Config) pluginSpecs() []plugins.Spec {
	var out []plugins.Spec
	for _, p := range c.Plugins {
		p = p.withDefaults()
		var env []string
		for k, v := range p.Env {
			env = append(env, k+"="+v)
		}
		sort.Strings(env)
		out = append(out, plugins.Spec{Name: p.Name, Path: p.Path, Args: p.Args, Env: env, Outcomes: p.Outcomes,
			Timeout: p.Timeout.D(), MaxAttempts: p.MaxAttempts, MaxAge: p.MaxAge.D(), Retry: backoff.Schedule{First: p.Retry.First.D(), Max: p.Retry.Max.D(), Jitter: p.Retry.Jitter}})
	}
	return out
}

// Keyring loads the DKIM keys and policy; an error names the file or key
// at fault.
func (c *DKIMConfig) Keyring() (*dkim.Keyring, error) {
	p := dkim.Policy{Canonicalization: c.Canonicalization, Headers: c.Headers, Oversign: c.Oversign,
		Expiry: c.Expiry.D(), Required: c.Required}
	var specs []dkim.KeySpec
	for _, k := range c.Keys {
		specs = append(specs, dkim.KeySpec{Domain: k.Domain, Selector: k.Selector, File: k.KeyFile, Active: k.Active == nil || *k.Active})
	}
	return dkim.Load(p, specs)
}

// BounceAddresses are the routes' bounce addresses that carry the message
// id (VERP), by which bounces are tied to their message.
func (c *Config) BounceAddresses() []string {
	var out []string
	for _, rc := range append([]RouteConfig{c.Routes.Default}, c.Routes.Senders...) {
		if strings.Contains(rc.BounceAddress, "{id}") {
			out = append(out, rc.BounceAddress)
		}
	}
	return out
}

// mailbox is the account's mailbox, where its receipts come.
func (a PECAccountConfig) mailbox() MailboxConfig {
	host, port, _ := net.SplitHostPort(a.IMAP)
	p, _ := strconv.Atoi(port)
	return MailboxConfig{Name: "pec " + a.Address, Host: host, Port: p, TLS: mailbox.TLSImplicit, TLSCAFile: a.TLSCAFile,
		Username: a.username(), PasswordFile: a.PasswordFile, PasswordEnv: a.PasswordEnv, Folder: a.Folder,
		ProcessedFolder: a.ProcessedFolder, UnmatchedFolder: a.UnmatchedFolder, Poll: a.Poll}
}

// mailbox fills in the defaults and reads the password.
func (mc MailboxConfig) mailbox(owner string, getenv func(string) string) (mailbox.Config, error) {
	mc = mc.withDefaults()
	if mc.Host == "" || mc.Username == "" {
		return mailbox.Config{}, errors.New("a mailbox needs host and username")
	}
	if err := mailbox.CheckTLS(mc.TLS, mc.Host); err != nil {
		return mailbox.Config{}, fmt.Errorf("mailbox %s: %w", mc.Host, err)
	}
	pw, err := secret(mc.PasswordFile, mc.PasswordEnv, getenv)
	if err != nil {
		return mailbox.Config{}, fmt.Errorf("mailbox %s: password: %w; set password_file or password_env", mc.Name, err)
	}
	return mailbox.Config{Name: mc.Name, Addr: mailbox.Addr(mc.Host, mc.Port, mc.TLS), TLS: mc.TLS, CAFile: mc.TLSCAFile,
		SkipVerify: mc.TLSSkipVerify, Username: mc.Username, Password: pw, Folder: mc.Folder,
		Processed: mc.ProcessedFolder, Unmatched: mc.UnmatchedFolder, Poll: mc.Poll.D(), Lease: mailboxLease, Owner: owner}, nil
}

// mailboxConfigs are the settings of the mailboxes mcs (those of key, as
// the configuration names them), their passwords read.
func mailboxConfigs(key string, mcs []MailboxConfig, owner string, getenv func(string) string) ([]mailbox.Config, error) {
	out := make([]mailbox.Config, 0, len(mcs))
	for i, mc := range mcs {
		cfg, err := mc.mailbox(owner, getenv)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", key, i, err)
		}
		out = append(out, cfg)
	}
	return out, nil
}

// mailboxes are the PEC accounts' mailboxes, where their receipts come.
func (p *PECConfig) mailboxes() []MailboxConfig {
	out := make([]MailboxConfig, len(p.Accounts))
	for i, a := range p.Accounts {
		out[i] = a.mailbox()
	}
	return out
}

// roots are the authorities of the trust bundle, nil without one.
func (p *PECConfig) roots() (*x509.CertPool, error) {
	if p.TrustBundle == "" {
		return nil, nil
	}
	roots, err := pec.LoadTrustBundle(p.TrustBundle)
	if err != nil {
		return nil, fmt.Errorf("pec.trust_bundle: %w", err)
	}
	return roots, nil
}
