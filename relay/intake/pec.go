package intake

import (
	"context"
	"fmt"
	"strings"

	"github.com/emersion/go-message/mail"
	"github.com/emersion/go-message/textproto"
	"github.com/emersion/go-smtp"
)

// HeaderPECReceipt asks, per message, for the kind of delivery receipt a
// PEC provider sends back; the provider reads it as X-TipoRicevuta.
const (
	HeaderPECReceipt = "X-Postino-PEC-Receipt"
	headerTipo       = "X-TipoRicevuta"
)

// PECAccount is a certified-mail account messages are sent from.
type PECAccount struct {
	Address string
	// Receipt is the account's X-TipoRicevuta: completa, breve or
	// sintetica.
	Receipt string
}

// ParsePECReceipt accepts an X-TipoRicevuta value in any case; empty is
// the default, completa.
func ParsePECReceipt(v string) (string, error) {
	switch l := strings.ToLower(strings.TrimSpace(v)); l {
	case "":
		return "completa", nil
	case "completa", "breve", "sintetica":
		return l, nil
	}
	return "", fmt.Errorf("%q: use completa, breve or sintetica", v)
}

// pecAccount is the PEC account env sends from, if any: its sender, or
// the user it authenticated as.
func (s *Server) pecAccount(env Envelope) (PECAccount, bool) {
	for _, who := range []string{env.From, env.AuthUser} {
		if a, ok := s.cfg.PEC[strings.ToLower(who)]; ok && who != "" {
			return a, true
		}
	}
	return PECAccount{}, false
}

func pecRefusal(format string, args ...any) error {
	return refusal(550, smtp.EnhancedCode{5, 7, 1}, format, args...)
}

// checkPEC holds a message from a PEC account to what its provider
// requires, so that it is refused now, with the reason, rather than by the
// provider later: MAIL FROM and From are the account, the Message-ID
// (the key of every receipt) is the message's own, and X-TipoRicevuta says
// which receipts to send.
func (s *Server) checkPEC(ctx context.Context, env Envelope, h *textproto.Header, ctrl control, ident identity) error {
	acct, ok := s.pecAccount(env)
	if !ok {
		if _, asked := ctrl.raw[HeaderPECReceipt]; asked {
			return contentError("%s is for messages sent from a PEC account, and %s is none", HeaderPECReceipt, orNull(env.From))
		}
		return nil
	}
	if !strings.EqualFold(env.From, acct.Address) {
		return pecRefusal("PEC account %s sends only with MAIL FROM:<%s>, not <%s>; the provider would refuse it", acct.Address, acct.Address, env.From)
	}
	mh := mail.Header{}
	mh.Header.Header = *h
	from, err := mh.AddressList("From")
	if err != nil || len(from) != 1 || !strings.EqualFold(from[0].Address, acct.Address) {
		return pecRefusal("PEC account %s sends only with From: %s, and the message has From: %s; the provider would refuse it",
			acct.Address, acct.Address, h.Get("From"))
	}
	receipt := acct.Receipt
	if v, asked := ctrl.raw[HeaderPECReceipt]; asked {
		if receipt, err = ParsePECReceipt(v); err != nil {
			return contentError("%s %v", HeaderPECReceipt, err)
		}
	}
	h.Del(headerTipo)
	addField(h, headerTipo, receipt)
	if ident.messageID != "" {
		others, err := s.outbox.ByMessageID(ctx, ident.messageID)
		if err != nil {
			return tempFailure("Outbox unavailable", err)
		}
		for _, o := range others {
			if o.ID != ident.id {
				return contentError("Message-ID <%s> is already used by message %s; PEC receipts are matched by Message-ID: give each message its own, or leave it out and the relay makes one",
					ident.messageID, o.ID)
			}
		}
	}
	return nil
}

func orNull(sender string) string {
	if sender == "" {
		return "<>"
	}
	return sender
}
