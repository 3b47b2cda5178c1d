package relay

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/mail"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/genropy/postino/internal/loopback"
	"github.com/genropy/postino/relay/delivery"
	"github.com/genropy/postino/relay/delivery/sites"
	"github.com/genropy/postino/relay/dkim"
	"github.com/genropy/postino/relay/intake"
)

// Config is the relay's configuration: one YAML file, every key of which an
// environment variable can override (POSTINO_ and the key path in capitals,
// smtp.listen as POSTINO_SMTP_LISTEN), and the common ones flags too.
type Config struct {
	// DataDir holds the spool and outbox.db.
	DataDir string `yaml:"data_dir"`
	// Hostname names the relay in SMTP and in generated Message-IDs;
	// empty means the machine's host name.
	Hostname string         `yaml:"hostname"`
	SMTP     SMTPConfig     `yaml:"smtp"`
	Admin    AdminConfig    `yaml:"admin"`
	Outbox   OutboxConfig   `yaml:"outbox"`
	Spool    SpoolConfig    `yaml:"spool"`
	Intake   IntakeConfig   `yaml:"intake"`
	Delivery DeliveryConfig `yaml:"delivery"`
	Routes   RoutesConfig   `yaml:"routes"`
	DKIM     DKIMConfig     `yaml:"dkim"`
	Bounces  BouncesConfig  `yaml:"bounces"`
	PEC      PECConfig      `yaml:"pec"`
	Plugins  []PluginConfig `yaml:"plugins"`
	// Streams are the kinds of mail with settings of their own;
	// transactional, every message's that names none, always is one.
	Streams     []StreamConfig    `yaml:"streams"`
	Suppression SuppressionConfig `yaml:"suppression"`
	Unsubscribe UnsubscribeConfig `yaml:"unsubscribe"`
	Brake       BrakeConfig       `yaml:"brake"`
	// Submissions are the tables apps write their mail to in their own
	// transactions (relay/submissions).
	Submissions []SubmissionsConfig `yaml:"submissions"`
	// Retention is how long a message is kept once acknowledged (its row,
	// history and file), for queue show and as the idempotency window of its
	// id.
	Retention Duration  `yaml:"retention"`
	Log       LogConfig `yaml:"log"`

	// ServiceLinks are the variables Kubernetes set for a Service named
	// postino (or postino-…) that LoadConfig ignored: no setting has
	// their names. New names them in the log.
	ServiceLinks []string `yaml:"-"`
}

type SMTPConfig struct {
	// Listen is the SMTP listener's host:port (--listen, POSTINO_LISTEN).
	Listen string `yaml:"listen"`
	// MaxMessageSize is the largest message taken (SIZE); a larger one is
	// refused with 552 5.3.4.
	MaxMessageSize ByteSize `yaml:"max_message_size"`
	// MaxRecipients is the most recipients one message may have.
	MaxRecipients int `yaml:"max_recipients"`
	// MaxLineLength bounds body lines. A line over RFC 5322's 998 octets
	// (HTML generated on one line) is taken, and its part re-encoded as
	// quoted-printable; a longer one is refused. go-smtp bounds command
	// lines with the same limit: it buffers a command line whole.
	MaxLineLength ByteSize `yaml:"max_line_length"`
	// BareNewlines is "normalize" (a lone CR or LF becomes CRLF) or
	// "reject".
	BareNewlines string `yaml:"bare_newlines"`
	// AllowNetworks may send without AUTH. Unset, it is loopback only.
	AllowNetworks []string   `yaml:"allow_networks"`
	TLS           TLSConfig  `yaml:"tls"`
	Auth          AuthConfig `yaml:"auth"`
	// ReadTimeout is how long a command, or a read of the data, may take.
	ReadTimeout Duration `yaml:"read_timeout"`
	// WriteTimeout is how long a reply may take to write.
	WriteTimeout Duration `yaml:"write_timeout"`
	// MaxSessions bounds the sessions open at once; ReservedSessions of
	// them only clients of AllowNetworks may take, and a client outside
	// AllowNetworks holds at most MaxSessionsPerClient. Over a limit, a
	// client gets 421 at once.
	MaxSessions int `yaml:"max_sessions"`
	// MaxSessionsPerClient is the most sessions one address (an IPv6 client by
	// its /64) outside allow_networks may hold.
	MaxSessionsPerClient int `yaml:"max_sessions_per_client"`
	// ReservedSessions of max_sessions only clients of allow_networks may
	// take.
	ReservedSessions int `yaml:"reserved_sessions"`
	// TransactionTimeout bounds a transaction from MAIL to the end of the
	// data, plus the time its data takes at MinDataRate.
	TransactionTimeout Duration `yaml:"transaction_timeout"`
	// MinDataRate is the bytes per second the data must average once it
	// has taken longer than ReadTimeout; 0 is no minimum.
	MinDataRate ByteSize `yaml:"min_data_rate"`
}

type TLSConfig struct {
	// CertFile is the PEM certificate (its intermediates after it) the
	// listener offers with STARTTLS; with key_file, or neither.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the certificate's PEM private key.
	KeyFile string `yaml:"key_file"`
}

type AuthConfig struct {
	// Accounts may AUTH; AUTH is off without any.
	Accounts []Account `yaml:"accounts"`
	// AllowInsecure offers AUTH without TLS.
	AllowInsecure bool `yaml:"allow_insecure"`
	// Limits slow down and stop password guessing.
	Limits AuthLimitsConfig `yaml:"limits"`
}

// AuthLimitsConfig bounds failed AUTH attempts (intake.AuthLimits says what
// each does); 0 turns a limit off.
type AuthLimitsConfig struct {
	// Delay answers a failed AUTH this long after it, doubled for each failure
	// of the same address.
	Delay Duration `yaml:"delay"`
	// MaxDelay bounds the doubled delay.
	MaxDelay Duration `yaml:"max_delay"`
	// PerSession failures close the session with 421 4.7.0.
	PerSession int `yaml:"per_session"`
	// PerClient failures from one address (an IPv6 client by its /64) within
	// window refuse AUTH from it until the window ends.
	PerClient int `yaml:"per_client"`
	// Window is how long an address's failures are counted.
	Window Duration `yaml:"window"`
	// Clients is how many addresses are remembered; the oldest of a few make
	// room.
	Clients int `yaml:"clients"`
}

func (a AuthLimitsConfig) intake() intake.AuthLimits {
	return intake.AuthLimits{Delay: a.Delay.D(), MaxDelay: a.MaxDelay.D(), PerSession: a.PerSession,
		PerClient: a.PerClient, Window: a.Window.D(), Clients: a.Clients}
}

func (a AuthLimitsConfig) check() error {
	if a.Delay < 0 || a.MaxDelay < 0 || a.PerSession < 0 || a.PerClient < 0 || a.Window < 0 || a.Clients < 0 {
		return errors.New("smtp.auth.limits: no value may be negative (0 turns a limit off)")
	}
	if a.PerClient > 0 && (a.Window == 0 || a.Clients == 0) {
		return errors.New("smtp.auth.limits.per_client needs a window and a number of clients to remember (window: 15m, clients: 10000)")
	}
	if a.MaxDelay != 0 && a.MaxDelay < a.Delay {
		return fmt.Errorf("smtp.auth.limits.max_delay %s is below delay %s", a.MaxDelay.D(), a.Delay.D())
	}
	return nil
}

// Account is an SMTP AUTH user. The password comes from a file or an
// environment variable, never from the configuration itself.
type Account struct {
	// Username is the account's AUTH name.
	Username string `yaml:"username"`
	// PasswordFile holds the account's password (one of password_file and
	// password_env).
	PasswordFile string `yaml:"password_file"`
	// PasswordEnv names the variable holding the account's password.
	PasswordEnv string `yaml:"password_env"`
}

type AdminConfig struct {
	// Listen is the admin API's and the dashboard's host:port (--admin,
	// POSTINO_ADMIN).
	Listen string `yaml:"listen"`
	// The token the API and the dashboard ask for, from a file or an
	// environment variable; required when Listen is not loopback.
	TokenFile string `yaml:"token_file"`
	// TokenEnv names the variable holding the token (one of token_file and
	// token_env).
	TokenEnv string `yaml:"token_env"`
	// Profiling serves Go's profiles (net/http/pprof) under /debug/pprof/,
	// behind the token like the rest of the API: a CPU profile of a relay
	// under load is how its cost is found. Off by default, as a profile
	// tells much about the process and costs CPU while it runs.
	Profiling bool `yaml:"profiling"`
}

// Token reads the admin token; empty when none is configured.
func (a AdminConfig) Token(getenv func(string) string) (string, error) {
	if a.TokenFile == "" && a.TokenEnv == "" {
		return "", nil
	}
	t, err := secret(a.TokenFile, a.TokenEnv, getenv)
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	return t, nil
}

type OutboxConfig struct {
	// Backend is bolt (embedded, the default), mysql, postgres or
	// dynamodb; the last three let several relays share one outbox (and
	// one spool directory).
	Backend  string         `yaml:"backend"`
	Bolt     BoltConfig     `yaml:"bolt"`
	MySQL    MySQLConfig    `yaml:"mysql"`
	Postgres PostgresConfig `yaml:"postgres"`
	DynamoDB DynamoDBConfig `yaml:"dynamodb"`
}

// Where a message's bytes live (spool.store).
const (
	// SpoolLocal is the spool directory on this relay's own disk: only
	// this relay can deliver what it accepted.
	SpoolLocal = "local"
	// SpoolShared is the spool directory on a filesystem every relay of
	// the fleet mounts (NFS, EFS, a shared volume): the same code as
	// local, and any relay delivers any message, as long as the mount
	// holds; fsync must reach the shared storage for a 250 to be safe.
	SpoolShared = "shared"
	// SpoolOutbox keeps the bytes in the outbox store, committed with the
	// row: the relays share nothing but the store, and their data
	// directories hold only their journals and PEC receipts.
	SpoolOutbox = "outbox"
)

// SpoolConfig says where messages' bytes are kept.
type SpoolConfig struct {
	// Store is local (the default), shared or outbox (MySQL, PostgreSQL or
	// DynamoDB).
	Store string `yaml:"store"`
	// MinFreeSpace is the free space the spool's file system needs for
	// the relay to take mail (local and shared); 0 is one and a half
	// times smtp.max_message_size, as Postfix.
	MinFreeSpace ByteSize `yaml:"min_free_space"`
}

type MySQLConfig struct {
	// DSN is user:password@tcp(host:3306)/database; it may come from a file
	// or a variable instead, as it holds a password.
	DSN string `yaml:"dsn"`
	// DSNFile holds the DSN, for a password kept out of the configuration.
	DSNFile string `yaml:"dsn_file"`
	// DSNEnv names the variable holding the DSN.
	DSNEnv string `yaml:"dsn_env"`
	// TLSCAFile makes TLS required, verified against these authorities;
	// the DSN may also ask for TLS itself (tls=true).
	TLSCAFile string `yaml:"tls_ca_file"`
	// MaxConns bounds the connections to the server; 0 is the store's default.
	MaxConns int `yaml:"max_conns"`
}

type PostgresConfig struct {
	// DSN is postgres://user:password@host:5432/database (or PostgreSQL's
	// key=value form; sslmode and sslrootcert ask for TLS); it may come
	// from a file or a variable instead, as it holds a password.
	DSN string `yaml:"dsn"`
	// DSNFile holds the DSN, for a password kept out of the configuration.
	DSNFile string `yaml:"dsn_file"`
	// DSNEnv names the variable holding the DSN.
	DSNEnv string `yaml:"dsn_env"`
	// MaxConns bounds the connections to the server; 0 is the store's default.
	MaxConns int `yaml:"max_conns"`
}

type DynamoDBConfig struct {
	// Table defaults to EMAIL_OUTBOX_TABLE.
	Table string `yaml:"table"`
	// Endpoint defaults to AWS_ENDPOINT_URL (DynamoDB Local).
	Endpoint string `yaml:"endpoint"`
	// Region is the AWS region; empty is the SDK's (AWS_REGION).
	Region string `yaml:"region"`
	// TTL lets DynamoDB drop a message's items this long after their last
	// change, its bytes this long after it was accepted; 0 writes no TTL.
	// It must be longer than delivery.retry.max_age.
	TTL Duration `yaml:"ttl"`
}

type BoltConfig struct {
	// Path defaults to outbox.db in the data directory.
	Path string `yaml:"path"`
}

type IntakeConfig struct {
	// Workers is how many messages the intake worker prepares at once.
	Workers int `yaml:"workers"`
	// Lease is how long a message stays INTAKING without a sign of life;
	// the worker renews it every third of it.
	Lease Duration `yaml:"lease"`
	// Poll is how often ACCEPTED messages no wake-up announced (another
	// relay's, restored leases) are looked for.
	Poll Duration `yaml:"poll"`
}

type DeliveryConfig struct {
	// Paused holds every message in READY: nothing is sent until it is
	// false again (for maintenance, or to measure intake alone).
	Paused bool `yaml:"paused"`
	// MaxInFlight bounds the messages being delivered at once.
	MaxInFlight int `yaml:"max_in_flight"`
	// Lease is how long a message stays PROCESSING without a sign of life:
	// the relay renews it every third of it while a delivery lasts, and a
	// dead relay's messages go to another within it. A message with less
	// than half of it left when a session takes it (renewals failed) is
	// handed back instead of sent. Relays sharing an outbox hold a site's
	// session slots under the same lease: a dead relay's are free within it.
	Lease Duration `yaml:"lease"`
	// Poll is how often READY messages are looked for when nothing wakes the
	// engine.
	Poll Duration `yaml:"poll"`
	// IdleTimeout keeps an upstream session open for the next message.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// ShutdownTimeout lets deliveries in progress finish on SIGTERM.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// MXConnections bounds the sessions to one site of MX delivery (the
	// MX hosts a domain resolves to) that no rule of delivery.sites bounds.
	MXConnections int `yaml:"mx_connections"`
	// MXPort is where MX hosts listen: 25.
	MXPort   int            `yaml:"mx_port"`
	Retry    RetryConfig    `yaml:"retry"`
	Timeouts TimeoutsConfig `yaml:"timeouts"`
	// RouteDownAfter is how many connection attempts in a row to a
	// route's upstream fail before the route is reported down (a WARN,
	// /readyz degraded, postino_route_up 0); the first that succeeds
	// reports it up again.
	RouteDownAfter int         `yaml:"route_down_after"`
	DNS            DNSConfig   `yaml:"dns"`
	TLS            MXTLSConfig `yaml:"tls"`
	Sites          SitesConfig `yaml:"sites"`
}

// SitesConfig shapes MX delivery by site: the MX hosts a recipient domain
// resolves to, or a provider's (docs/delivery.md). The rules that ship
// (relay/delivery/sites/providers.yaml) give each site its limits
// (sessions at once, messages per session, per minute and per hour, new
// connections per minute), how they adapt (AIMD) and rules on response
// text.
type SitesConfig struct {
	// File is a YAML file of the same shape as the shipped rules: its
	// default, adapt and down settings replace theirs one by one, its
	// providers replace those of the same name and add others, its
	// responses are read first.
	File string `yaml:"file"`
	// Metrics is how many sites of no known provider the metrics name by
	// their MX hosts (the first seen); the others are counted as other.
	Metrics int `yaml:"metrics"`
}

// MXTLSConfig is the TLS of MX delivery beyond a route's tls mode. DANE
// (RFC 7672) needs no setting: wherever an MX host publishes TLSA records
// that validating servers (delivery.dns.validating) authenticated, its
// certificate must match them, and the message waits when it does not.
type MXTLSConfig struct {
	// Policies set the TLS of MX delivery by recipient domain
	// (example.com), or by a suffix for its subdomains (.example.com;
	// the domain's own setting wins over a suffix's, a longer suffix over
	// a shorter): none (in clear, DANE too ignored), opportunistic (the
	// default: STARTTLS when offered, any certificate), verify (STARTTLS
	// required, the certificate verified against the system's authorities
	// and roots for the MX host's name) or dane (DANE required: an MX
	// host without usable authenticated TLSA records is not sent to). A
	// domain failing its policy waits, as for a host that does not
	// answer. They apply to routes without a smarthost.
	Policies map[string]string `yaml:"policies"`
	// Roots is a file of authorities (PEM) that policy verify, MTA-STS
	// (MX hosts and policy hosts) and TLS reports' https: addresses trust
	// beside the system's.
	Roots   string           `yaml:"roots"`
	MTASTS  MTASTSConfig     `yaml:"mta_sts"`
	Reports TLSReportsConfig `yaml:"reports"`
}

// MTASTSConfig is MTA-STS (RFC 8461) on MX delivery: where a recipient
// domain publishes a policy (its _mta-sts TXT record, the policy at
// https://mta-sts.DOMAIN/.well-known/mta-sts.txt), mode enforce sends
// only to the MX hosts it lists, over TLS verified for their names, and
// the message waits otherwise; mode testing sends as before and counts
// what failed for the domain's TLS report. DANE wins where an MX host
// publishes authenticated TLSA records. A policy is fetched once per
// max_age for every relay sharing the outbox, which keeps it.
type MTASTSConfig struct {
	// Enabled looks policies up for domains whose TLS policy is
	// opportunistic (the default) or mta-sts.
	Enabled bool `yaml:"enabled"`
	// Timeout bounds a policy's fetch.
	Timeout Duration `yaml:"timeout"`
	// Recheck is how often a domain's _mta-sts TXT record is asked again
	// while its policy holds: a new id there is a new policy.
	Recheck Duration `yaml:"recheck"`
	// Port is the policy hosts' HTTPS port: 443.
	Port int `yaml:"port"`
}

// TLSReportsConfig is TLS reporting (RFC 8460): the relays count each MX
// session's TLS result by domain, for the domains with an MTA-STS policy
// or DANE, in the outbox; once a day one of them sends each domain that
// publishes a _smtp._tls TXT record its report (gzip'd JSON), by mail
// through the relay (rua=mailto:) or by HTTPS (rua=https:).
type TLSReportsConfig struct {
	// Enabled counts the sessions and sends the reports; it needs
	// organization and contact.
	Enabled bool `yaml:"enabled"`
	// Organization names the reporter in the reports (organization-name).
	Organization string `yaml:"organization"`
	// Contact is the reporter's address (contact-info), and the sender of
	// the mailed reports.
	Contact string `yaml:"contact"`
	// Period is a report's window: a day, as RFC 8460 asks (UTC days).
	Period Duration `yaml:"period"`
	// Delay is how long after a window's end its reports go out: every
	// relay writes its counts each minute.
	Delay Duration `yaml:"delay"`
}

func (t *MXTLSConfig) check() error {
	m := t.MTASTS
	if m.Enabled && (m.Timeout <= 0 || m.Recheck <= 0 || m.Port <= 0) {
		return errors.New("delivery.tls.mta_sts.timeout, recheck and port must be positive")
	}
	for _, domain := range slices.Sorted(maps.Keys(t.Policies)) {
		if t.Policies[domain] == delivery.PolicyMTASTS && !m.Enabled {
			return fmt.Errorf("delivery.tls.policies: %s: mta-sts needs delivery.tls.mta_sts.enabled", domain)
		}
	}
	r := t.Reports
	if !r.Enabled {
		return nil
	}
	if r.Organization == "" {
		return errors.New("delivery.tls.reports.organization: name the organization the reports come from")
	}
	if a, err := mail.ParseAddress(r.Contact); err != nil || a.Name != "" {
		return fmt.Errorf("delivery.tls.reports.contact %q: give the address that sends the reports, and that their readers may write to (tls-reports@example.com)", r.Contact)
	}
	if r.Period < Duration(time.Second) || time.Duration(r.Period)%time.Second != 0 || r.Delay < 0 || r.Delay >= r.Period {
		return errors.New("delivery.tls.reports.period must be whole seconds (24h, as RFC 8460 asks), and delay from 0 to less than the period")
	}
	return nil
}

// DNSConfig is how MX delivery asks DNS, and how far it believes it.
type DNSConfig struct {
	// Servers are the resolvers MX delivery asks, each IP:port, in order:
	// one that fails is passed for the next, and a "no such domain" answer
	// is put to a second. Empty is the system's resolver
	// (/etc/resolv.conf).
	Servers []string `yaml:"servers"`
	// Validating says that the servers validate DNSSEC: only then does the
	// relay believe an answer's AD bit (DANE needs it). It needs servers:
	// the system's resolver does not say.
	Validating bool `yaml:"validating"`
	// Timeout bounds one question to one of the servers, which are gone
	// through twice (the system's resolver keeps its own settings).
	Timeout Duration `yaml:"timeout"`
	// ConfirmAfter is how long after DNS first said that a domain does not
	// exist the same answer is final: its recipients fail (550 5.1.2).
	// Until then, unless a second server says so too, they wait (451
	// 4.4.3), so that broken DNS fails no mail for good. Neither
	// confirmation counts while the resolvers cannot answer the root
	// zone's NS question.
	ConfirmAfter Duration `yaml:"confirm_after"`
}

type RetryConfig struct {
	// First is the wait after a message's first deferral, doubled after each
	// next one.
	First Duration `yaml:"first"`
	// Max bounds the doubled wait.
	Max Duration `yaml:"max"`
	// MaxAge ends a message that is still deferred this long after it was
	// accepted: it fails as expired.
	MaxAge Duration `yaml:"max_age"`
	// Jitter varies each delay by this fraction either way.
	Jitter float64 `yaml:"jitter"`
}

// TimeoutsConfig bounds each step of an upstream session; the defaults are
// RFC 5321's (section 4.5.3.2).
type TimeoutsConfig struct {
	// Connect bounds the TCP connection to an upstream.
	Connect Duration `yaml:"connect"`
	// Greeting bounds the wait for the upstream's 220.
	Greeting Duration `yaml:"greeting"`
	// Command bounds the reply to each command (EHLO, MAIL, RCPT, …).
	Command Duration `yaml:"command"`
	// DataInit bounds the reply to DATA.
	DataInit Duration `yaml:"data_init"`
	// DataBlock bounds each write of the message's data.
	DataBlock Duration `yaml:"data_block"`
	// DataEnd bounds the reply to the end of the data.
	DataEnd Duration `yaml:"data_end"`
}

type RoutesConfig struct {
	// Default carries what no sender route matches. Without a smarthost it
	// delivers to the recipients' MX hosts.
	Default RouteConfig `yaml:"default"`
	// Senders are tried in order; the first that matches takes the message.
	Senders []RouteConfig `yaml:"senders"`
}

type RouteConfig struct {
	// Name names a sender route in logs, metrics and history.
	Name  string      `yaml:"name"`
	Match MatchConfig `yaml:"match"`
	// Smarthost is host:port; empty means MX delivery.
	Smarthost string `yaml:"smarthost"`
	// TLS is one of delivery.TLSModes: none (the default with a
	// smarthost), opportunistic (STARTTLS when offered; MX delivery's
	// only mode and default), starttls (required, certificate verified)
	// or tls (implicit, port 465).
	TLS string `yaml:"tls"`
	// TLSSkipVerify takes any certificate of the smarthost (starttls, tls):
	// for a test upstream, never across a network.
	TLSSkipVerify bool `yaml:"tls_skip_verify"`
	// TLSCAFile adds authorities (PEM) the smarthost's certificate may be
	// signed by.
	TLSCAFile string `yaml:"tls_ca_file"`
	// Username is the account to AUTH with at the smarthost (needs tls
	// starttls or tls).
	Username string `yaml:"username"`
	// The password comes from a file or a variable, never from here.
	PasswordFile string `yaml:"password_file"`
	// PasswordEnv names the variable holding the password (one of
	// password_file and password_env).
	PasswordEnv string `yaml:"password_env"`
	// MaxConnections bounds the sessions open to the smarthost at once.
	MaxConnections int `yaml:"max_connections"`
	// Rate bounds the messages sent a second through the route; 0 is no bound.
	Rate float64 `yaml:"rate"`
	// BounceAddress replaces the envelope sender upstream so that DSNs
	// reach the bounce mailbox; {id} in it becomes the message id (VERP).
	BounceAddress string `yaml:"bounce_address"`
	// DKIMDomain signs the route's messages for this domain instead of
	// their From header's.
	DKIMDomain string `yaml:"dkim_domain"`
	// Stream is the stream of the route's messages that name none
	// (X-Postino-Stream); empty is transactional.
	Stream string `yaml:"stream"`
}

// DKIMConfig is how messages are signed as they leave. SIGHUP reloads it,
// keys included, without a restart.
type DKIMConfig struct {
	// Required makes a message whose signing domain has no active key fail
	// instead of going out unsigned.
	Required bool `yaml:"required"`
	// Canonicalization is header/body: relaxed/relaxed or simple.
	Canonicalization string `yaml:"canonicalization"`
	// Headers are signed where present; Oversign once more than present.
	Headers []string `yaml:"headers"`
	// Oversign lists the headers signed once more than present, so that none
	// can be added after signing.
	Oversign []string `yaml:"oversign"`
	// Expiry sets x= this long after signing; 0 sets none.
	Expiry Duration  `yaml:"expiry"`
	Keys   []DKIMKey `yaml:"keys"`
}

// BouncesConfig is where bounces come back: the mailboxes that receive
// what is sent to the routes' bounce addresses.
type BouncesConfig struct {
	Mailboxes []MailboxConfig `yaml:"mailboxes"`
}

// MailboxConfig is one IMAP folder the relay watches.
type MailboxConfig struct {
	// Name names it in logs, metrics and /readyz; default user@host.
	Name string `yaml:"name"`
	// Host is the IMAP server's name.
	Host string `yaml:"host"`
	// Port defaults to 993 with tls, 143 otherwise.
	Port int `yaml:"port"`
	// TLS is tls (implicit), starttls, or none (loopback only).
	TLS string `yaml:"tls"`
	// TLSCAFile adds authorities (PEM) the server's certificate may be signed
	// by.
	TLSCAFile string `yaml:"tls_ca_file"`
	// TLSSkipVerify takes any certificate: for a test server, never across a
	// network.
	TLSSkipVerify bool `yaml:"tls_skip_verify"`
	// Username is the IMAP login.
	Username string `yaml:"username"`
	// The password comes from a file or a variable, never from here.
	PasswordFile string `yaml:"password_file"`
	// PasswordEnv names the variable holding the password (one of
	// password_file and password_env).
	PasswordEnv string `yaml:"password_env"`
	// Folder is watched; handled mail is moved to ProcessedFolder, mail
	// that is not a bounce of a known message to UnmatchedFolder.
	Folder string `yaml:"folder"`
	// ProcessedFolder receives the mail handled (a bounce of a known message).
	ProcessedFolder string `yaml:"processed_folder"`
	// UnmatchedFolder receives the mail that is no bounce of a known message.
	UnmatchedFolder string `yaml:"unmatched_folder"`
	// Poll is the interval between looks when the server lacks IDLE.
	Poll Duration `yaml:"poll"`
}

// PECConfig is certified mail: the accounts it is sent from, and how its
// receipts are followed.
type PECConfig struct {
	Accounts []PECAccountConfig `yaml:"accounts"`
	// TrustBundle holds the providers' certificate authorities (PEM); the
	// receipts' S/MIME signatures are checked against it. Empty: not
	// checked, and the events say so.
	TrustBundle string `yaml:"trust_bundle"`
	// A message with no acceptance this long after SENT, or a recipient
	// with no delivery outcome this long after acceptance, raises an event.
	AcceptanceTimeout Duration `yaml:"acceptance_timeout"`
	// DeliveryTimeout raises an event for a recipient with no delivery outcome
	// this long after acceptance.
	DeliveryTimeout Duration `yaml:"delivery_timeout"`
}

// PECAccountConfig is one PEC mailbox at its provider.
type PECAccountConfig struct {
	// Address is the account: a message with it as envelope sender (or
	// authenticated as it) is sent through the account, and must have it
	// as From.
	Address string `yaml:"address"`
	// Username defaults to Address.
	Username string `yaml:"username"`
	// PasswordFile holds the account's password (one of password_file and
	// password_env).
	PasswordFile string `yaml:"password_file"`
	// PasswordEnv names the variable holding the account's password.
	PasswordEnv string `yaml:"password_env"`
	// SMTP and IMAP are the provider's endpoints, host:port, implicit TLS.
	SMTP string `yaml:"smtp"`
	// IMAP is the provider's IMAP endpoint, host:port, implicit TLS, where the
	// receipts arrive.
	IMAP string `yaml:"imap"`
	// TLSCAFile adds authorities to trust for both endpoints.
	TLSCAFile string `yaml:"tls_ca_file"`
	// Receipt is the X-TipoRicevuta asked for: completa (default), breve
	// or sintetica; X-Postino-PEC-Receipt overrides it per message.
	Receipt string `yaml:"receipt"`
	// Folder is watched for receipts.
	Folder string `yaml:"folder"`
	// ProcessedFolder receives the receipts handled.
	ProcessedFolder string `yaml:"processed_folder"`
	// UnmatchedFolder receives the mail that is no receipt of a known message.
	UnmatchedFolder string `yaml:"unmatched_folder"`
	// Poll is the interval between looks when the server lacks IDLE.
	Poll Duration `yaml:"poll"`
}

func (p *PECConfig) check() error {
	if p.AcceptanceTimeout <= 0 || p.DeliveryTimeout <= 0 {
		return errors.New("pec.acceptance_timeout and pec.delivery_timeout must be positive, for instance 30m and 24h")
	}
	seen := map[string]bool{}
	for i, a := range p.Accounts {
		addr := strings.ToLower(a.Address)
		if _, err := mail.ParseAddress(a.Address); err != nil || !strings.Contains(a.Address, "@") {
			return fmt.Errorf("pec.accounts[%d].address %q is not an address", i, a.Address)
		}
		if seen[addr] {
			return fmt.Errorf("pec account %s is given twice", a.Address)
		}
		seen[addr] = true
		for _, ep := range []struct{ key, v string }{{"smtp", a.SMTP}, {"imap", a.IMAP}} {
			if _, _, err := net.SplitHostPort(ep.v); err != nil {
				return fmt.Errorf("pec account %s: %s %q: give the provider's host:port (implicit TLS, for instance smtps.pec.example.it:465)", a.Address, ep.key, ep.v)
			}
		}
		if _, err := intake.ParsePECReceipt(a.Receipt); err != nil {
			return fmt.Errorf("pec account %s: receipt %w", a.Address, err)
		}
	}
	return nil
}

// DKIMKey is one key of one signing domain.
type DKIMKey struct {
	// Domain is the signing domain (d=).
	Domain string `yaml:"domain"`
	// Selector names the key's DNS record (s=):
	// <selector>._domainkey.<domain>.
	Selector string `yaml:"selector"`
	// KeyFile holds the private key, PEM (RSA or Ed25519); it must not be
	// readable by others.
	KeyFile string `yaml:"key_file"`
	// Active, true when left out, signs with the key; an inactive key
	// waits for its record to spread, or stays while the old one expires.
	Active *bool `yaml:"active"`
}

// MatchConfig picks the messages of a sender route: all the conditions
// given must hold.
type MatchConfig struct {
	// Sender matches the envelope sender, whole, case folded.
	Sender string `yaml:"sender"`
	// Domain matches the envelope sender's domain.
	Domain string `yaml:"domain"`
	// AuthUser matches the SMTP AUTH account the message came in with.
	AuthUser string `yaml:"auth_user"`
}

// PluginConfig declares a status-callback plugin.
type PluginConfig struct {
	// Name defaults to the file name of Path.
	Name string `yaml:"name"`
	// Path is the plugin's executable.
	Path string `yaml:"path"`
	// Args are given to the plugin's executable.
	Args []string `yaml:"args"`
	// Env is added to the relay's own environment for the plugin.
	Env map[string]string `yaml:"env"`
	// Outcomes, when set, overrides those the plugin asks for.
	Outcomes []string `yaml:"outcomes"`
	// Timeout bounds one call; a plugin that takes longer is restarted.
	Timeout Duration `yaml:"timeout"`
	// An event is parked after MaxAttempts failed tries (0: no bound) or
	// once older than MaxAge (0: no bound).
	MaxAttempts int `yaml:"max_attempts"`
	// MaxAge parks an event once older than this (0: no bound).
	MaxAge Duration          `yaml:"max_age"`
	Retry  PluginRetryConfig `yaml:"retry"`
}

// PluginRetryConfig shapes the waits between tries of an event: first,
// doubling up to max, each varied by jitter (a fraction) either way. How long
// tries go on is the plugin's max_age or max_attempts.
type PluginRetryConfig struct {
	// First is the wait after an event's first failed try.
	First Duration `yaml:"first"`
	// Max bounds the doubled wait.
	Max Duration `yaml:"max"`
	// Jitter varies each wait by this fraction either way.
	Jitter float64 `yaml:"jitter"`
}

type LogConfig struct {
	// Level is debug, info, warn or error.
	Level string `yaml:"level"`
	// Format is text or json.
	Format string `yaml:"format"`
}

// DefaultConfig is the embedded default: bbolt and the spool under ./var,
// SMTP and the admin API on loopback.
func DefaultConfig() Config {
	return Config{
		DataDir: "./var",
		SMTP: SMTPConfig{
			Listen:         "127.0.0.1:2525",
			MaxMessageSize: 25 << 20,
			MaxRecipients:  1000,
			MaxLineLength:  256 << 10,
			BareNewlines:   "normalize",
			ReadTimeout:    Duration(5 * time.Minute),
			WriteTimeout:   Duration(5 * time.Minute),
			// Near Postfix's: 100 processes, 50 per client, 500
			// bytes per second of data.
			MaxSessions:          200,
			MaxSessionsPerClient: 50,
			ReservedSessions:     20,
			TransactionTimeout:   Duration(10 * time.Minute),
			MinDataRate:          500,
			Auth: AuthConfig{Limits: AuthLimitsConfig{Delay: Duration(time.Second), MaxDelay: Duration(8 * time.Second),
				PerSession: 3, PerClient: 10, Window: Duration(15 * time.Minute), Clients: 10000}},
		},
		Admin:  AdminConfig{Listen: "127.0.0.1:8525"},
		Outbox: OutboxConfig{Backend: "bolt"},
		Spool:  SpoolConfig{Store: SpoolLocal},
		Intake: IntakeConfig{Workers: 4, Lease: Duration(time.Minute), Poll: Duration(5 * time.Second)},
		Delivery: DeliveryConfig{
			MaxInFlight:     512,
			Lease:           Duration(time.Minute),
			Poll:            Duration(time.Second),
			IdleTimeout:     Duration(5 * time.Second),
			ShutdownTimeout: Duration(30 * time.Second),
			MXConnections:   10,
			MXPort:          25,
			Retry:           RetryConfig{First: Duration(time.Minute), Max: Duration(time.Hour), MaxAge: Duration(5 * 24 * time.Hour), Jitter: 0.2},
			Timeouts: TimeoutsConfig{Connect: Duration(30 * time.Second), Greeting: Duration(5 * time.Minute),
				Command: Duration(5 * time.Minute), DataInit: Duration(2 * time.Minute),
				DataBlock: Duration(3 * time.Minute), DataEnd: Duration(10 * time.Minute)},
			RouteDownAfter: 5,
			// Longer than .com's and .net's negative caching (15
			// minutes), so that the second answer is not the first
			// replayed from a cache; the retries' default schedule
			// confirms at the fifth attempt.
			DNS:   DNSConfig{Timeout: Duration(5 * time.Second), ConfirmAfter: Duration(15 * time.Minute)},
			Sites: SitesConfig{Metrics: 20},
			TLS: MXTLSConfig{MTASTS: MTASTSConfig{Enabled: true, Timeout: Duration(30 * time.Second), Recheck: Duration(time.Hour), Port: 443},
				Reports: TLSReportsConfig{Period: Duration(24 * time.Hour), Delay: Duration(time.Hour)}},
		},
		Routes:    RoutesConfig{Default: RouteConfig{MaxConnections: defaultRouteConnections}},
		DKIM:      defaultDKIM(),
		PEC:       PECConfig{AcceptanceTimeout: Duration(30 * time.Minute), DeliveryTimeout: Duration(24 * time.Hour)},
		Retention: Duration(7 * 24 * time.Hour),
		Log:       LogConfig{Level: "info", Format: "text"},
		// One finding suppresses: the verdicts counted hard are the
		// address's own (docs/suppression.md), as Amazon SES and Postmark
		// do; entries stay until an operator removes them.
		Suppression: SuppressionConfig{HardBounce: SuppressionRuleConfig{After: 1}, Complaint: SuppressionRuleConfig{After: 1}},
		Unsubscribe: UnsubscribeConfig{Grace: Duration(180 * 24 * time.Hour), Rate: 1, Burst: 20},
		Brake:       BrakeConfig{MinSent: 200, HardRate: 0.05, ComplaintRate: 0.003},
	}
}

func defaultDKIM() DKIMConfig {
	p := dkim.DefaultPolicy()
	return DKIMConfig{Canonicalization: p.Canonicalization, Headers: p.Headers, Oversign: p.Oversign}
}

// DefaultPlugin is a plugin with default settings, as --plugin adds it.
func DefaultPlugin(path string) PluginConfig {
	return PluginConfig{Path: path, Timeout: Duration(10 * time.Second), MaxAge: Duration(24 * time.Hour),
		Retry: PluginRetryConfig{First: Duration(time.Second), Max: Duration(5 * time.Minute), Jitter: 0.2}}
}

// LoadConfig reads the defaults, then the file at path (if not empty), then
// the POSTINO_* variables of env. Every key or value at fault in the file and
// every variable at fault is reported, a file's with its line.
func LoadConfig(path string, env []string) (Config, error) {
	cfg := DefaultConfig()
	var fileErr error
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("read config: %w", err)
		}
		fileErr = joinAt(decodeYAML(data, &cfg, ""), func(line int) string {
			if line == 0 {
				return "config " + path
			}
			return fmt.Sprintf("config %s line %d", path, line)
		}, "\n")
	}
	return cfg, errors.Join(fileErr, applyEnv(&cfg, env))
}

// Check reports the settings that cannot work, saying how to fix them: the
// first of each section. It reads no file and no variable; Validate does.
func (c *Config) Check() error {
	if c.DataDir == "" {
		return errors.New("data_dir is empty: set it (or --data, POSTINO_DATA) to the directory for the spool and outbox.db")
	}
	// Both addresses before the sections: the exposure and admin token
	// rules read the host out of them.
	for _, l := range []struct{ key, addr string }{{"smtp.listen", c.SMTP.Listen}, {"admin.listen", c.Admin.Listen}} {
		if _, _, err := net.SplitHostPort(l.addr); err != nil {
			return fmt.Errorf("%s %q is not a host:port address: %v", l.key, l.addr, err)
		}
	}
	var errs []error
	for _, check := range []func() error{c.SMTP.check, c.Admin.check, c.checkOutbox, c.checkSpool, c.Intake.check,
		c.Delivery.check, c.PEC.check, c.checkPlugins, c.checkSubmissions, c.checkRetention, c.Log.check, c.checkStreams, c.checkUnsubscribe, c.Brake.check} {
		errs = append(errs, check())
	}
	return errors.Join(errs...)
}

func (s *SMTPConfig) check() error {
	if _, err := s.allowNetworks(); err != nil {
		return err
	}
	switch s.BareNewlines {
	case "normalize", "reject":
	default:
		return fmt.Errorf("smtp.bare_newlines %q: use normalize or reject", s.BareNewlines)
	}
	if s.MaxLineLength < 78 {
		return fmt.Errorf("smtp.max_line_length %d is too small: RFC 5322 allows 998", s.MaxLineLength)
	}
	if s.MaxMessageSize <= 0 || s.MaxRecipients <= 0 {
		return errors.New("smtp.max_message_size and smtp.max_recipients must be positive")
	}
	if err := s.checkLimits(); err != nil {
		return err
	}
	if (s.TLS.CertFile == "") != (s.TLS.KeyFile == "") {
		return errors.New("smtp.tls needs both cert_file and key_file")
	}
	if err := s.checkAuth(); err != nil {
		return err
	}
	return s.checkExposure()
}

// checkLimits checks the limits on sessions, which must leave room for
// clients outside the allowed networks.
func (s *SMTPConfig) checkLimits() error {
	if s.MaxSessions <= 0 || s.MaxSessionsPerClient <= 0 || s.ReservedSessions < 0 || s.TransactionTimeout <= 0 {
		return errors.New("smtp.max_sessions, smtp.max_sessions_per_client and smtp.transaction_timeout must be positive, smtp.reserved_sessions not negative")
	}
	if s.ReservedSessions >= s.MaxSessions || s.MaxSessionsPerClient > s.MaxSessions {
		return fmt.Errorf("smtp.reserved_sessions (%d) must be below smtp.max_sessions (%d), and smtp.max_sessions_per_client (%d) at most that",
			s.ReservedSessions, s.MaxSessions, s.MaxSessionsPerClient)
	}
	return nil
}

func (s *SMTPConfig) checkAuth() error {
	if err := s.Auth.Limits.check(); err != nil {
		return err
	}
	for i, a := range s.Auth.Accounts {
		if a.Username == "" {
			return fmt.Errorf("smtp.auth.accounts[%d] has no username", i)
		}
		if (a.PasswordFile == "") == (a.PasswordEnv == "") {
			return fmt.Errorf("smtp.auth account %q: give exactly one of password_file and password_env", a.Username)
		}
	}
	if len(s.Auth.Accounts) > 0 && s.TLS.CertFile == "" && !s.Auth.AllowInsecure {
		return errors.New("smtp.auth has accounts but no TLS: clients could not authenticate; " +
			"set smtp.tls.cert_file and key_file, or smtp.auth.allow_insecure: true on a network you trust")
	}
	return nil
}

// checkExposure refuses an open relay: a listener that clients beyond this
// machine can reach, with no AUTH and no list of networks trusted without it.
func (s *SMTPConfig) checkExposure() error {
	host, _, _ := net.SplitHostPort(s.Listen)
	if len(s.Auth.Accounts) > 0 || s.AllowNetworks != nil {
		return nil
	}
	if loopback.Host(host) {
		return nil
	}
	return fmt.Errorf("smtp.listen %s can be reached from other machines, but neither AUTH nor allowed networks are configured, "+
		"so anyone there could send mail through this relay; add smtp.auth.accounts, or list the networks of your apps in "+
		"smtp.allow_networks (POSTINO_SMTP_ALLOW_NETWORKS=172.18.0.0/16 for a compose network)", s.Listen)
}

func (a *AdminConfig) check() error {
	if a.TokenFile != "" && a.TokenEnv != "" {
		return errors.New("admin: give one of token_file and token_env, not both")
	}
	if !loopback.Host(a.Listen) && a.TokenFile == "" && a.TokenEnv == "" {
		return fmt.Errorf("admin.listen %s can be reached from other machines, and the admin API can retry, cancel and read every message: "+
			"give it a token with admin.token_file or admin.token_env (POSTINO_ADMIN_TOKEN_FILE=/run/secrets/postino-admin), "+
			"or listen on 127.0.0.1", a.Listen)
	}
	return nil
}

func (c *Config) checkSpool() error {
	switch c.Spool.Store {
	case SpoolLocal, SpoolShared:
	case SpoolOutbox:
		if s, _ := c.store(); s.local != "" {
			return fmt.Errorf("spool.store outbox keeps messages in a store the fleet shares, and %s: "+
				"use spool.store local with %s, or outbox.backend %s", s.local, s.name, storeNames(func(s outboxStore) bool { return s.local == "" }, "or"))
		}
	default:
		return fmt.Errorf("spool.store %q: use local, shared or outbox", c.Spool.Store)
	}
	return nil
}

func (i *IntakeConfig) check() error {
	if i.Workers <= 0 || i.Lease <= 0 || i.Poll <= 0 {
		return errors.New("intake.workers, intake.lease and intake.poll must be positive")
	}
	return nil
}

func (d *DeliveryConfig) check() error {
	if d.MaxInFlight <= 0 || d.Lease <= 0 || d.Poll <= 0 || d.IdleTimeout <= 0 || d.MXConnections <= 0 || d.MXPort <= 0 {
		return errors.New("delivery.max_in_flight, lease, poll, idle_timeout, mx_connections and mx_port must be positive")
	}
	if d.RouteDownAfter <= 0 {
		return errors.New("delivery.route_down_after must be positive: the connection attempts in a row that fail before a route is reported down (5 by default)")
	}
	if err := d.Timeouts.check(); err != nil {
		return err
	}
	if err := d.DNS.check(); err != nil {
		return err
	}
	if _, err := d.Sites.rules(d.MXConnections); err != nil {
		return err
	}
	if err := d.TLS.check(); err != nil {
		return err
	}
	for _, domain := range slices.Sorted(maps.Keys(d.TLS.Policies)) {
		if d.TLS.Policies[domain] == delivery.PolicyDANE && !d.DNS.Validating {
			return fmt.Errorf("delivery.tls.policies: %s: dane needs delivery.dns.servers that validate DNSSEC, and delivery.dns.validating: "+
				"only their answers' AD bit says the TLSA records are the domain's", domain)
		}
	}
	return d.Retry.check()
}

func (d *DNSConfig) check() error {
	if d.Timeout <= 0 || d.ConfirmAfter <= 0 {
		return errors.New("delivery.dns.timeout and delivery.dns.confirm_after must be positive")
	}
	if d.Validating && len(d.Servers) == 0 {
		return errors.New("delivery.dns.validating needs delivery.dns.servers: the system's resolver does not say whether it validated an answer")
	}
	for i, s := range d.Servers {
		host, _, err := net.SplitHostPort(s)
		if err == nil {
			_, err = netip.ParseAddr(host)
		}
		if err != nil {
			return fmt.Errorf("delivery.dns.servers[%d] %q is not an IP:port address (127.0.0.1:53, [::1]:53): %v", i, s, err)
		}
		if slices.Contains(d.Servers[:i], s) {
			return fmt.Errorf("delivery.dns.servers[%d] %s is listed twice: it would confirm its own answers", i, s)
		}
	}
	return nil
}

func (t *TimeoutsConfig) check() error {
	if t.Connect <= 0 || t.Greeting <= 0 || t.Command <= 0 || t.DataInit <= 0 || t.DataBlock <= 0 || t.DataEnd <= 0 {
		return errors.New("every delivery.timeouts value must be positive")
	}
	return nil
}

func (r *RetryConfig) check() error {
	if r.First <= 0 || r.Max < r.First || r.MaxAge <= 0 || r.Jitter < 0 || r.Jitter >= 1 {
		return errors.New("delivery.retry: first and max_age must be positive, max at least first, jitter from 0 to below 1")
	}
	return nil
}

func (c *Config) checkPlugins() error {
	for i, p := range c.Plugins {
		if err := p.check(i); err != nil {
			return err
		}
	}
	return nil
}

// check checks plugins[i].
func (p *PluginConfig) check(i int) error {
	if p.Path == "" {
		return fmt.Errorf("plugins[%d] has no path", i)
	}
	if p.Timeout < 0 || p.Retry.First < 0 || (p.Retry.Max != 0 && p.Retry.Max < p.Retry.First) || p.MaxAttempts < 0 || p.MaxAge < 0 || p.Retry.Jitter < 0 || p.Retry.Jitter >= 1 {
		return fmt.Errorf("plugin %s: timeout, retry, max_attempts and max_age cannot be negative, retry.max is at least retry.first, and retry.jitter goes from 0 to below 1", p.Path)
	}
	return nil
}

func (c *Config) checkRetention() error {
	if c.Retention <= 0 {
		return errors.New("retention must be positive, for instance 7d")
	}
	return nil
}

func (l *LogConfig) check() error {
	switch l.Format {
	case "text", "json":
	default:
		return fmt.Errorf("log.format %q: use text or json", l.Format)
	}
	_, err := l.SlogLevel()
	return err
}

// SlogLevel is the level as log/slog reads it.
func (l LogConfig) SlogLevel() (slog.Level, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.Level)); err != nil {
		return level, fmt.Errorf("log.level %q: use debug, info, warn or error", l.Level)
	}
	return level, nil
}

// allowNetworks parses smtp.allow_networks; unset, it is loopback.
func (s *SMTPConfig) allowNetworks() ([]netip.Prefix, error) {
	nets := s.AllowNetworks
	if nets == nil {
		nets = loopbackNetworks
	}
	var out []netip.Prefix
	for _, n := range nets {
		n = strings.TrimSpace(n)
		if p, err := netip.ParsePrefix(n); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(n)
		if err != nil {
			return nil, fmt.Errorf("smtp.allow_networks: %q is neither a network (10.0.0.0/8) nor an address", n)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// secret reads a secret from a file (its trailing newline dropped) or from
// an environment variable.
func secret(file, envName string, getenv func(string) string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("read secret: %w", err)
		}
		s := strings.TrimRight(string(b), "\r\n")
		if s == "" {
			return "", fmt.Errorf("secret file %s is empty", file)
		}
		return s, nil
	}
	s := getenv(envName)
	if s == "" {
		return "", fmt.Errorf("environment variable %s is empty or unset", envName)
	}
	return s, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkDSN says what is wrong when the settings key give a DSN in none or
// several of their three ways; flag names the command-line flag that sets
// dsn, if any.
func checkDSN(key, flag, dsn, file, env string) error {
	if n := btoi(dsn != "") + btoi(file != "") + btoi(env != ""); n != 1 {
		return fmt.Errorf("%s needs exactly one of dsn%s, dsn_file and dsn_env", key, flag)
	}
	return nil
}

// dsnOf is the DSN a store's settings (key) give: dsn, or the secret of
// dsn_file or dsn_env.
func dsnOf(key, dsn, file, env string, getenv func(string) string) (string, error) {
	if dsn != "" {
		return dsn, nil
	}
	dsn, err := secret(file, env, getenv)
	if err != nil {
		return "", fmt.Errorf("%s DSN: %w", key, err)
	}
	return dsn, nil
}

// journalPath is where this relay keeps the outcomes the outbox failed to
// take: a file of its own, named after the relay, since the relays of a
// fleet may share a data directory.
func (c *Config) journalPath() string {
	return filepath.Join(c.DataDir, "outcomes-"+strings.ReplaceAll(c.Hostname, string(filepath.Separator), "_")+".db")
}

func (c *Config) spoolDir() string { return filepath.Join(c.DataDir, "spool") }

// minFreeSpace is the free space the spool needs to take mail.
func (c *Config) minFreeSpace() uint64 {
	if c.Spool.MinFreeSpace > 0 {
		return uint64(c.Spool.MinFreeSpace)
	}
	return uint64(c.SMTP.MaxMessageSize) * 3 / 2
}

// Duration is a time.Duration written as Go writes it ("90s", "1h30m") or
// in days ("7d").
type Duration time.Duration

func (d *Duration) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	v, err := time.ParseDuration(s)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n float64
		n, err = strconv.ParseFloat(days, 64)
		v = time.Duration(n * float64(24*time.Hour))
	}
	if err != nil {
		return fmt.Errorf("duration %q: use a number and a unit, such as 90s, 5m, 1h or 7d", s)
	}
	*d = Duration(v)
	return nil
}

func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// D is the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// ByteSize is a size in bytes, written plainly or with a unit: 25MB, 25MiB,
// 512KiB.
type ByteSize int64

func (b *ByteSize) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("size %q: use bytes or a unit, such as 25MiB or 10MB", string(text))
	}
	*b = ByteSize(n * mult)
	return nil
}

// MarshalYAML writes the size in the largest binary unit that holds it
// whole (25MiB, 256KiB), else as a number of bytes.
func (b ByteSize) MarshalYAML() (any, error) {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n := int64(b); n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix, nil
		}
	}
	return int64(b), nil
}

// rules are the shipped site rules with the operator's file.
func (s *SitesConfig) rules(sessions int) (*sites.Rules, error) {
	var b []byte
	if s.File != "" {
		var err error
		if b, err = os.ReadFile(s.File); err != nil {
			return nil, fmt.Errorf("delivery.sites.file: %w", err)
		}
	}
	r, err := sites.Load(b, sessions)
	if err != nil {
		return nil, fmt.Errorf("delivery.sites.file %s: %w (see docs/delivery.md for its shape)", s.File, err)
	}
	if s.Metrics < 0 {
		return nil, errors.New("delivery.sites.metrics may not be negative")
	}
	return r, nil
}
