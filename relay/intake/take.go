package intake

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/emersion/go-message/textproto"
	"github.com/emersion/go-smtp"
	"github.com/google/uuid"

	"github.com/genropy/postino/backends"
)

// Envelope is who hands a message over, and for whom: an SMTP transaction,
// or a row of an app's submissions table. Take reads the message with it.
type Envelope struct {
	From string
	To   []string
	// UTF8 says the sender may use UTF-8 in addresses and headers
	// (SMTPUTF8).
	UTF8 bool
	// ID, when set, is the message's X-Genro-Mail-ID: a message carrying
	// another is refused.
	ID string
	// Control sets X-Postino-* controls as their header fields would, by
	// field name; a message carrying one of those fields too is refused.
	Control map[string]string
	// The sender, named in the Received field, the row and the logs: an
	// SMTP client's address (ClientIP, and ClientAddr with its port) and
	// EHLO name; for a submission, Helo alone says where it was read.
	ClientIP   string
	ClientAddr string
	Helo       string
	AuthUser   string
	TLS        bool
	// Protocol is the WITH clause of the Received field.
	Protocol string
	// Broken, when set, says the data may have been cut short: the message
	// is then not recorded.
	Broken func() bool
}

// source names the sender: its address, or where the message was read.
func (env *Envelope) source() string {
	if env.ClientIP != "" {
		return env.ClientIP
	}
	return env.Helo
}

// CheckEnvelope checks what SMTP checks at MAIL and RCPT, for a message
// handed over otherwise (a submissions table): the spool can take it, its
// size, the sender, and the recipients.
func (s *Server) CheckEnvelope(env Envelope, size int64) error {
	if err := s.spoolFull(); err != nil {
		return err
	}
	if s.cfg.MaxMessageSize > 0 && size > s.cfg.MaxMessageSize {
		return refusal(552, smtp.ErrDataTooLarge.EnhancedCode, "The message is %d bytes, over the %d this relay accepts", size, s.cfg.MaxMessageSize)
	}
	if env.From != "" {
		if err := checkAddress(env.From, env.UTF8, smtp.EnhancedCode{5, 1, 7}); err != nil {
			return err
		}
	}
	if len(env.To) == 0 {
		return refusal(554, smtp.EnhancedCode{5, 5, 1}, "No recipients: give at least one")
	}
	if s.cfg.MaxRecipients > 0 && len(env.To) > s.cfg.MaxRecipients {
		return refusal(554, smtp.EnhancedCode{5, 5, 3}, "%d recipients, over the %d this relay accepts in one message", len(env.To), s.cfg.MaxRecipients)
	}
	for _, to := range env.To {
		if err := checkAddress(to, env.UTF8, smtp.EnhancedCode{5, 1, 3}); err != nil {
			return err
		}
	}
	return nil
}

// Take reads, checks and records one message handed over as env says. It
// returns the message id when it knows it, and nil once the outbox holds
// the message, also when it held it already under that id; a *Refusal when
// it does not take it, permanent for a fault of the message; another error
// when the message could not be read whole (the connection failed). SMTP's
// DATA and the submissions tables both take mail here.
func (s *Server) Take(ctx context.Context, env Envelope, r io.Reader) (string, error) {
	now := time.Now().UTC()
	rd := s.getReader(r)
	defer s.putReader(rd)

	h, err := textproto.ReadHeader(rd.br)
	if err != nil {
		return env.ID, readError(err, "the header section is malformed: %v")
	}
	if err := applyEnvelope(&h, env); err != nil {
		return env.ID, err
	}
	ctrl, err := readControl(&h, now)
	if err != nil {
		return env.ID, err
	}
	if name := ctrl.raw[HeaderStream]; name != "" && s.cfg.Suppression != nil && !s.cfg.Suppression.Known(name) {
		return env.ID, contentError("%s names stream %q, which this relay does not configure; add it under streams, or leave the field out for the route's stream", HeaderStream, name)
	}
	ident, err := readIdentity(&h)
	if err != nil {
		return ident.id, err
	}

	lookup, cancel := context.WithTimeout(ctx, s.cfg.CommitTimeout)
	defer cancel()
	if ident.id == "" {
		ident.id = newID()
		addField(&h, HeaderMailID, ident.id)
	} else if err, done := s.resubmitted(lookup, env, ident.id, rd.br); done {
		return ident.id, err
	}
	if err := s.checkPEC(lookup, env, &h, ctrl, ident); err != nil {
		return ident.id, err
	}
	s.addTrace(&h, env, &ident, now)
	f, err := s.spoolMessage(ident.id, h, rd.br, now)
	if err != nil {
		return ident.id, err
	}
	if rd.sc.longLines {
		if f, err = s.recodeDraft(ident.id, f, now); err != nil {
			return ident.id, err
		}
	}
	// The body took as long as the client took to send it: the outbox's
	// own time starts once the file is safe.
	commit, cancelCommit := context.WithTimeout(ctx, s.cfg.CommitTimeout)
	defer cancelCommit()
	return ident.id, s.record(commit, f, env, ident, ctrl, rd.sc.eightBit, now)
}

// applyEnvelope puts the id and controls env gives into the header, where
// Take reads them as if the message carried them: given twice, they are
// refused.
func applyEnvelope(h *textproto.Header, env Envelope) error {
	if env.ID != "" {
		switch vals := h.Values(HeaderMailID); {
		case len(vals) == 0:
			addField(h, HeaderMailID, env.ID)
		case len(vals) > 1 || strings.TrimSpace(vals[0]) != env.ID:
			return contentError("the message's %s %q is not the submission's id %q; leave the field out", HeaderMailID, vals[0], env.ID)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(env.Control)) {
		if h.Has(name) {
			return contentError("the message carries %s, which the submission sets; leave the field out", name)
		}
		addField(h, name, env.Control[name])
	}
	return nil
}

// resubmitted answers an app that hands over again a message the outbox
// holds under id: the rest of the message is read and dropped, and it is
// taken, with no error. done is false when the outbox has no such message,
// and the message is new.
func (s *Server) resubmitted(ctx context.Context, env Envelope, id string, body io.Reader) (err error, done bool) {
	switch _, err := s.outbox.Get(ctx, id); {
	case err == nil:
		if _, err := io.Copy(io.Discard, body); err != nil {
			return readError(err, "%v"), true
		}
		s.log.Info("duplicate submission answered with the queued message", "id", id, "client", env.source())
		return nil, true
	case !errors.Is(err, backends.ErrNotFound):
		return tempFailure("Outbox unavailable", err), true
	}
	return nil, false
}

// addTrace adds the fields the relay stamps on a message: a Message-ID and
// a Date when the app gave none (ident gets the Message-ID), and Received.
func (s *Server) addTrace(h *textproto.Header, env Envelope, ident *identity, now time.Time) {
	if ident.messageID == "" {
		ident.messageID = newID() + "@" + s.cfg.Hostname
		addField(h, "Message-ID", "<"+ident.messageID+">")
	}
	if !h.Has("Date") {
		addField(h, "Date", now.Format(time.RFC1123Z))
	}
	addField(h, "Received", receivedField(env.Helo, env.ClientIP, s.cfg.Hostname, env.Protocol, ident.id, env.To, now))
}

// needsUTF8 reports whether the message must go on with SMTPUTF8: the
// client said it, and something may need it (an address, or 8-bit text
// that could be in a header). Apps whose library says SMTPUTF8 whenever the
// server offers it (Go's net/smtp does) send plain ASCII mail that way;
// passing it on without SMTPUTF8 is what RFC 6531 lets a relay do, and it
// then reaches upstreams that do not offer the extension.
func (env *Envelope) needsUTF8(eightBit bool) bool {
	return env.UTF8 && (eightBit || !ASCIIAddresses(env.From, env.To))
}

// newMessage is the row of a message env handed over, its bytes in f.
func newMessage(f draft, env Envelope, ident identity, ctrl control, eightBit bool, now time.Time) *backends.Message {
	m := &backends.Message{
		ID:        ident.id,
		MessageID: ident.messageID,
		Priority:  ctrl.priority,
		Batch:     ctrl.batch,
		DueAt:     ctrl.sendAfter,
		EmlPath:   f.Path(),
		Reason:    "accepted from " + env.source(),
		CreatedAt: now,
		Envelope: backends.Envelope{
			Sender:     env.From,
			Recipients: append([]string(nil), env.To...),
			ClientAddr: env.ClientAddr,
			Helo:       env.Helo,
			AuthUser:   env.AuthUser,
			TLS:        env.TLS,
			ReceivedAt: now,
			SMTPUTF8:   env.needsUTF8(eightBit),
			EightBit:   eightBit,
			Size:       f.Size(),
			Control:    ctrl.raw,
		},
	}
	if d, ok := f.(*memDraft); ok {
		m.Body = d.Bytes()
	}
	return m
}

// record records the spooled message f in the outbox: nil once it holds
// it, also when it had it already (an app's retry that raced with the first
// submission).
func (s *Server) record(ctx context.Context, f draft, env Envelope, ident identity, ctrl control, eightBit bool, now time.Time) error {
	m := newMessage(f, env, ident, ctrl, eightBit, now)
	if env.Broken != nil && env.Broken() {
		// The data may be cut short (BDAT), or the limits cut it: Data
		// replies with the cut, or to a client gone.
		f.Abort()
		return refusal(451, smtp.EnhancedCode{4, 4, 2}, "The connection failed during the data; nothing was kept, send the message again")
	}
	return s.create(ctx, f, m)
}

// create creates the row m of the draft f and hands it to the worker; a row the
// outbox has already is no error.
func (s *Server) create(ctx context.Context, f draft, m *backends.Message) error {
	err := s.outbox.Create(ctx, m)
	if errors.Is(err, backends.ErrDuplicate) {
		f.Abort()
		s.log.Info("duplicate submission answered with the queued message", "id", m.ID, "client", cmp.Or(m.Envelope.ClientAddr, m.Envelope.Helo))
		return nil
	}
	if err != nil {
		if errors.Is(err, backends.ErrOutcomeUnknown) {
			// The row may have landed, naming these bytes: they stay. If
			// it did not, the start-up sweep finds no row and removes them.
			s.log.Warn("the outbox's commit may have landed: the message's bytes are kept", "id", m.ID, "path", f.Path(), "error", err)
		} else {
			f.Abort()
		}
		s.noSpace(err)
		return tempFailure("Cannot record the message in the outbox", err)
	}
	s.log.Info("accepted", "id", m.ID, "message_id", m.MessageID, "from", m.Envelope.Sender,
		"rcpts", len(m.Envelope.Recipients), "size", f.Size(), "client", cmp.Or(m.Envelope.ClientAddr, m.Envelope.Helo), "user", m.Envelope.AuthUser)
	if s.prep != nil {
		// The worker reads the bytes by their path, as it does those of
		// a claimed row: the copy it holds keeps none in memory.
		h := *m
		h.Body = nil
		s.prep.Accepted(&h)
	}
	return nil
}

// Refuse records a message that Take or CheckEnvelope refused and that no
// reply can tell its sender of (a row of a submissions table): a row with
// the bytes it came with, which the intake worker makes INVALID with the
// reason, and an INVALID event the app's plugins hear, as for any invalid
// message. An id the outbox holds already is no error. An id that is not
// one (backends.CheckID) is replaced by one derived from it, the same each
// time (a refusal recorded again after its submission's transaction failed
// is still one message), and the reason names it.
func (s *Server) Refuse(ctx context.Context, env Envelope, raw []byte, reason string) (string, error) {
	id := env.ID
	if err := backends.CheckID(id); err != nil {
		id = uuid.NewSHA1(uuid.NameSpaceOID, []byte("postino submission "+env.ID)).String()
		reason = fmt.Sprintf("submission %q: %v; %s", env.ID, err, reason)
	}
	now := time.Now().UTC()
	f, err := s.writeDraft(id, now, func(w io.Writer) error {
		_, err := w.Write(raw)
		return err
	})
	if err != nil {
		return id, err
	}
	m := newMessage(f, env, identity{id: id}, control{priority: backends.PriorityNormal}, false, now)
	m.Reason = fmt.Sprintf("refused from %s: %s", env.source(), reason)
	m.Envelope.Refused = reason
	commit, cancel := context.WithTimeout(ctx, s.cfg.CommitTimeout)
	defer cancel()
	return id, s.create(commit, f, m)
}
