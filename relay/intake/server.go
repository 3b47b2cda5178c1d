// Package intake is the SMTP side of the relay: it receives a message from an
// app, checks it, writes it to the spool and the outbox, and only then
// answers 250. The intake worker then prepares accepted messages for
// delivery.
package intake

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/emersion/go-message/textproto"
	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"github.com/google/uuid"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/spool"
)

// Config is the SMTP side's configuration.
type Config struct {
	// Hostname names the relay in the greeting, Received fields and
	// generated Message-IDs.
	Hostname       string
	MaxMessageSize int64
	MaxRecipients  int
	// MaxLineLength bounds body lines (header lines are always bounded by
	// 998 octets).
	MaxLineLength int
	// RejectBareNewlines refuses messages with a CR or LF that is not part
	// of CRLF, instead of turning it into CRLF.
	RejectBareNewlines bool
	// AllowNetworks may send without AUTH.
	AllowNetworks []netip.Prefix
	// Accounts enables AUTH PLAIN and LOGIN when not nil.
	Accounts Accounts
	// AuthLimits slow down and stop password guessing.
	AuthLimits AuthLimits
	// AllowInsecureAuth offers AUTH without TLS.
	AllowInsecureAuth bool
	TLS               *tls.Config
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	// CommitTimeout bounds the outbox commit of one message.
	CommitTimeout time.Duration
	// PEC are the certified-mail accounts, by lower-case address.
	PEC map[string]PECAccount
	// StoreBodies hands a message's bytes to the outbox with its row
	// (spool.store outbox) instead of writing them to the spool.
	StoreBodies bool
	// MaxSessions bounds the sessions open at once, and
	// MaxSessionsPerClient those of one address outside AllowNetworks;
	// ReservedSessions of MaxSessions are kept for AllowNetworks. A client
	// over a limit gets 421 at once. Zero is no limit.
	MaxSessions          int
	MaxSessionsPerClient int
	ReservedSessions     int
	// TransactionTimeout bounds a transaction, from MAIL to the end of
	// the data, plus the time its data takes at MinDataRate; zero is no
	// bound.
	TransactionTimeout time.Duration
	// MinDataRate, in bytes per second, is what the data must average
	// once it has taken longer than ReadTimeout; zero is no minimum.
	MinDataRate int64
	// Space says whether the spool can take mail; nil is always.
	Space Space
	// Suppression, when set, knows the streams, and refuses at RCPT the
	// recipients a stream in refuse mode holds back.
	Suppression Suppression
}

// Suppression is what intake asks of the suppression list
// (suppression.Policy).
type Suppression interface {
	// Known reports whether a stream is configured.
	Known(stream string) bool
	// Refused returns the entry that refuses addr at RCPT of m (whose
	// envelope is being given), or nil.
	Refused(ctx context.Context, m *backends.Message, addr string, now time.Time) (*backends.Suppression, error)
}

// Outbox is what intake needs of the store.
type Outbox interface {
	Get(ctx context.Context, id string) (*backends.Message, error)
	ByMessageID(ctx context.Context, messageID string) ([]*backends.Message, error)
	Create(ctx context.Context, m *backends.Message) error
}

// Server receives messages over SMTP.
type Server struct {
	cfg     Config
	outbox  Outbox
	spool   *spool.Spool
	log     *slog.Logger
	metrics *Metrics
	auth    *authLimiter
	// prep is handed every newly queued message.
	prep   Preparer
	smtp   *smtp.Server
	limits *sessionLimits
	// readers keeps the buffers of finished sessions for the next ones:
	// allocating them per message keeps the collector busy under load.
	readers sync.Pool
}

// reader is what reading one message needs.
type reader struct {
	sc *scanner
	br *bufio.Reader
}

// Preparer takes each message the server has queued, to prepare it for
// sending: the intake worker (Worker.Accepted).
type Preparer interface {
	Accepted(m *backends.Message)
}

// NewServer builds the SMTP server; Serve starts it. prep, when not nil,
// is handed each message queued.
func NewServer(cfg Config, outbox Outbox, sp *spool.Spool, log *slog.Logger, m *Metrics, prep Preparer) *Server {
	s := &Server{cfg: cfg, outbox: outbox, spool: sp, log: log, metrics: m, prep: prep, auth: newAuthLimiter(cfg.AuthLimits),
		limits: &sessionLimits{max: cfg.MaxSessions, perClient: cfg.MaxSessionsPerClient, reserved: cfg.ReservedSessions,
			log: log, metrics: m, byClient: map[netip.Prefix]int{}}}
	srv := smtp.NewServer(s)
	srv.Domain = cfg.Hostname
	srv.MaxMessageBytes = cfg.MaxMessageSize
	srv.MaxRecipients = cfg.MaxRecipients
	// go-smtp ends the connection on a line over its limit; keep it well
	// above ours so that a long line gets a proper reply instead.
	srv.MaxLineLength = max(64<<10, cfg.MaxLineLength+2)
	srv.EnableSMTPUTF8 = true
	srv.TLSConfig = cfg.TLS
	srv.AllowInsecureAuth = cfg.AllowInsecureAuth
	srv.ReadTimeout = cfg.ReadTimeout
	srv.WriteTimeout = cfg.WriteTimeout
	srv.ErrorLog = slogAdapter{log}
	s.smtp = srv
	return s
}

// Serve accepts connections on l until Shutdown.
func (s *Server) Serve(l net.Listener) error {
	err := s.smtp.Serve(limitListener{Listener: replyListener{Listener: l, writeTimeout: s.cfg.WriteTimeout}, srv: s})
	if errors.Is(err, smtp.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections and waits for the sessions in
// progress to end; when ctx ends first, it closes those left (a message
// being committed still completes: only its reply is lost).
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.smtp.Shutdown(ctx)
	if ctx.Err() != nil {
		s.smtp.Close()
	}
	return err
}

type slogAdapter struct{ log *slog.Logger }

func (a slogAdapter) Printf(format string, v ...any) {
	a.log.Warn("smtp server: " + strings.TrimSpace(fmt.Sprintf(format, v...)))
}

func (a slogAdapter) Println(v ...any) {
	a.log.Warn("smtp server: " + strings.TrimSpace(fmt.Sprintln(v...)))
}

// NewSession implements smtp.Backend.
func (s *Server) NewSession(c *smtp.Conn) (smtp.Session, error) {
	ip := clientIP(c.Conn().RemoteAddr())
	trusted := s.trusted(ip)
	if !trusted && s.cfg.Accounts == nil {
		s.metrics.rejected("client")
		s.log.Warn("client refused: not in an allowed network", "client", ip)
		return nil, &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 7, 1},
			Message: fmt.Sprintf("Your address %s may not send through this relay", ip)}
	}
	_, isTLS := c.TLSConnectionState()
	lim, _ := connUnder[*limitConn](c.Conn())
	return &session{srv: s, conn: c, lim: lim, clientIP: ip, trusted: trusted, tls: isTLS}, nil
}

// trusted says whether ip is in the allowed networks: one of the apps.
func (s *Server) trusted(ip netip.Addr) bool {
	for _, p := range s.cfg.AllowNetworks {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

type session struct {
	srv      *Server
	conn     *smtp.Conn
	lim      *limitConn
	clientIP netip.Addr
	trusted  bool
	tls      bool
	authUser string
	// failures are the session's failed AUTHs; closing says it has been
	// told to end.
	failures int
	closing  bool

	from  string
	opts  smtp.MailOptions
	rcpts []string
}

func (s *session) AuthMechanisms() []string {
	if s.srv.cfg.Accounts == nil {
		return nil
	}
	return []string{sasl.Plain, sasl.Login}
}

func (s *session) Auth(mech string) (sasl.Server, error) {
	if err := s.authAllowed(time.Now()); err != nil {
		return nil, err
	}
	authenticate := func(username, password string) error {
		if !s.srv.cfg.Accounts.check(username, password) {
			return s.authFailed(username)
		}
		s.authUser = username
		return nil
	}
	switch mech {
	case sasl.Plain:
		return sasl.NewPlainServer(func(identity, username, password string) error {
			if identity != "" && identity != username {
				return &smtp.SMTPError{Code: 535, EnhancedCode: smtp.EnhancedCode{5, 7, 8},
					Message: "Authentication failed: acting as another user is not allowed"}
			}
			return authenticate(username, password)
		}), nil
	case sasl.Login:
		return &loginServer{authenticate: authenticate}, nil
	}
	return nil, smtp.ErrAuthUnknownMechanism
}

func (s *session) Mail(from string, opts *smtp.MailOptions) error {
	if !s.trusted && s.authUser == "" {
		s.srv.metrics.rejected("auth")
		return &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0},
			Message: "Authentication required: use AUTH (over TLS) before MAIL"}
	}
	if err := s.srv.spoolFull(); err != nil {
		return asReply(err)
	}
	if strings.ContainsFunc(s.conn.Hostname(), unicode.IsControl) {
		// The name goes into the Received field, where a bare CR would
		// start a header field of the client's making. Checked here, as
		// a second EHLO changes it without a new session, and resets the
		// transaction.
		s.srv.metrics.rejected("address")
		return &smtp.SMTPError{Code: 501, EnhancedCode: smtp.EnhancedCode{5, 5, 4},
			Message: "Your EHLO name holds a control character: say EHLO again with your host name"}
	}
	if from != "" {
		if err := checkAddress(from, opts.UTF8, smtp.EnhancedCode{5, 1, 7}); err != nil {
			s.srv.metrics.rejected("address")
			return asReply(err)
		}
	}
	s.from = from
	s.opts = *opts
	s.rcpts = s.rcpts[:0]
	s.lim.beginTransaction(time.Now())
	return nil
}

func (s *session) Rcpt(to string, opts *smtp.RcptOptions) error {
	if err := checkAddress(to, s.opts.UTF8, smtp.EnhancedCode{5, 1, 3}); err != nil {
		s.srv.metrics.rejected("address")
		return asReply(err)
	}
	if err := s.suppressed(to); err != nil {
		return err
	}
	s.rcpts = append(s.rcpts, to)
	return nil
}

// suppressed refuses a recipient that a stream in refuse mode holds back.
// The reply says why and since when, in the words of the entry's reason,
// and nothing else of the list: an address not on it and one held back for
// another stream get the same 250, so that RCPT is no way to read it.
func (s *session) suppressed(to string) error {
	sup := s.srv.cfg.Suppression
	if sup == nil {
		return nil
	}
	probe := &backends.Message{Envelope: backends.Envelope{Sender: s.from, AuthUser: s.authUser}}
	e, err := sup.Refused(context.Background(), probe, to, time.Now())
	if err != nil {
		s.srv.log.Error("intake: cannot read the suppression list; the recipient is taken, and checked again before delivery", "error", err)
		return nil
	}
	if e == nil {
		return nil
	}
	s.srv.metrics.rejected("suppressed")
	return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 7, 1},
		Message: fmt.Sprintf("Recipient suppressed since %s (%s); the relay does not send to it", e.Created.UTC().Format(time.DateOnly), e.Reason)}
}

func (s *session) Reset() {
	s.from = ""
	s.opts = smtp.MailOptions{}
	s.rcpts = s.rcpts[:0]
	s.lim.endTransaction()
}

func (s *session) Logout() error { return nil }

func (s *session) Data(r io.Reader) error {
	start := time.Now()
	s.lim.beginData(start)
	id, err := s.srv.Take(context.Background(), s.envelope(), r)
	if cut := s.lim.reply(); cut != nil {
		// Whatever the read in progress made of it, the limits ended the
		// transaction: nothing was stored, and the session closes.
		s.srv.metrics.rejected("slow")
		s.srv.log.Info("message refused", "id", id, "client", s.clientIP, "from", s.from, "error", cut)
		return cut
	}
	if err == nil {
		s.srv.metrics.accept(time.Since(start))
		// go-smtp sends the code and text of an SMTPError as they are, 250
		// included: the client learns the id.
		return &smtp.SMTPError{Code: 250, EnhancedCode: smtp.EnhancedCode{2, 0, 0}, Message: "Ok: queued as " + id}
	}
	refused, ok := errors.AsType[*Refusal](err)
	reason := "connection"
	switch {
	case !ok:
	case refused.Code/100 == 4:
		reason = "temporary"
	case refused.EnhancedCode == smtp.ErrDataTooLarge.EnhancedCode:
		reason = "size"
	default:
		reason = "content"
	}
	s.srv.metrics.rejected(reason)
	if ok && refused.cause != nil {
		s.srv.log.Error("message refused: the relay failed", "id", id, "client", s.clientIP, "from", s.from, "reply", refused.reply(), "error", refused.cause)
		return refused.reply()
	}
	s.srv.log.Info("message refused", "id", id, "client", s.clientIP, "from", s.from, "error", err)
	return asReply(err)
}

// envelope is the transaction's envelope, for Take.
func (s *session) envelope() Envelope {
	return Envelope{From: s.from, To: s.rcpts, UTF8: s.opts.UTF8,
		ClientIP: s.clientIP.String(), ClientAddr: s.conn.Conn().RemoteAddr().String(), Helo: s.conn.Hostname(),
		AuthUser: s.authUser, TLS: s.tls, Protocol: s.protocol(), Broken: s.lim.broken}
}

// getReader takes a reader from the pool, or makes one, and sets it to
// read r.
func (s *Server) getReader(r io.Reader) *reader {
	rd, _ := s.readers.Get().(*reader)
	if rd == nil {
		rd = &reader{sc: newScanner(nil, false, 0)}
		rd.br = bufio.NewReaderSize(rd.sc, 32<<10)
	}
	rd.sc.reset(r, s.cfg.RejectBareNewlines, s.cfg.MaxLineLength)
	rd.br.Reset(rd.sc)
	return rd
}

// putReader gives rd back to the pool, holding on to no connection.
func (s *Server) putReader(rd *reader) {
	rd.sc.reset(nil, false, 0)
	rd.br.Reset(nil)
	s.readers.Put(rd)
}

// draft is a message's bytes being written: a spool file, or memory that
// the outbox takes with the row (Config.StoreBodies).
type draft interface {
	io.Writer
	// Commit makes the bytes durable before the row is created; after an
	// error the caller must Abort.
	Commit() error
	Abort()
	// Path is the reference the row records.
	Path() string
	Size() int64
}

// memDraft holds a message for the outbox, which commits it with its row.
type memDraft struct {
	bytes.Buffer
	path string
}

func (d *memDraft) Commit() error { return nil }
func (d *memDraft) Abort()        {}
func (d *memDraft) Path() string  { return d.path }
func (d *memDraft) Size() int64   { return int64(d.Len()) }

// createDraft starts the bytes of message id where the configuration keeps
// them.
func (s *Server) createDraft(id string, now time.Time) (draft, error) {
	if s.cfg.StoreBodies {
		return &memDraft{path: backends.BodyRef(id, backends.Nonce())}, nil
	}
	return s.spool.Create(id, now)
}

// spoolMessage writes the header h and the rest of the message, read from
// body, to its draft and commits it. A write that fails is a temporary
// failure; a read that fails is the client's, replied as readError says.
func (s *Server) spoolMessage(id string, h textproto.Header, body io.Reader, now time.Time) (draft, error) {
	f, err := s.writeDraft(id, now, func(w io.Writer) error {
		if err := textproto.WriteHeader(w, h); err != nil {
			return err
		}
		_, err := io.Copy(w, body)
		return err
	})
	if err != nil {
		return nil, readError(err, "%v")
	}
	return f, nil
}

// writeDraft makes a draft of message id, writes it with write and commits
// it. A write or a commit that fails is the relay's (451, and the spool is
// told when space ran out); write's own errors are returned as they are.
func (s *Server) writeDraft(id string, now time.Time, write func(io.Writer) error) (draft, error) {
	f, err := s.createDraft(id, now)
	if err != nil {
		s.noSpace(err)
		return nil, tempFailure("Cannot write the message to the spool", err)
	}
	ew := &errWriter{w: f}
	err = write(ew)
	if err == nil {
		err = f.Commit()
		ew.err = err
	}
	if err != nil {
		f.Abort()
		if ew.err != nil {
			s.noSpace(ew.err)
			return nil, tempFailure("Cannot write the message to the spool", ew.err)
		}
		return nil, err
	}
	return f, nil
}

// protocol is the WITH clause of the Received field (RFC 3848, RFC 6531).
func (s *session) protocol() string {
	p := "ESMTP"
	if s.opts.UTF8 {
		p = "UTF8SMTP"
	}
	if s.tls {
		p += "S"
	}
	if s.authUser != "" {
		p += "A"
	}
	return p
}

// readError turns an error met while reading the message into its reply:
// the scanner's and go-smtp's own replies pass as they are.
func readError(err error, format string) error {
	if refused, ok := errors.AsType[*Refusal](err); ok {
		return refused
	}
	if reply, ok := errors.AsType[*smtp.SMTPError](err); ok {
		return &Refusal{Code: reply.Code, EnhancedCode: reply.EnhancedCode, Message: reply.Message}
	}
	if errors.Is(err, smtp.ErrTooLongLine) {
		return contentError("a line is longer than this relay accepts")
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("connection lost during DATA: %w", err)
	}
	return contentError(format, err)
}

// errWriter remembers a write error, so that a failing disk is told apart
// from a failing client.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil {
		e.err = err
	}
	return n, err
}

// newID makes a message id: a time-ordered UUID, so that ids of a database
// store land near each other in its primary key.
func newID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}
