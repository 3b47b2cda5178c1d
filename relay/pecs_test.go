package relay_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/internal/testrig/imaptest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/internal/testrig/testcert"
	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/pec"
	"github.com/genropy/postino/relay/pec/pectest"
)

const pecAccount = "ufficio@pec.example.it"

// pecSetup is a relay with one PEC account whose provider speaks implicit
// TLS and AUTH on SMTP and IMAP, and a test plugin.
type pecSetup struct {
	cfg      relay.Config
	provider *smtptest.Server
	box      *imaptest.Server
	ca       *pectest.CA
	out      string
}

func newPECSetup(t *testing.T) *pecSetup {
	t.Helper()
	cert := testcert.New(t)
	cfg, _ := testConfig(t)
	s := &pecSetup{cfg: cfg, ca: pectest.NewCA(t)}
	s.provider = smtptest.Start(t, smtptest.Options{TLS: cert.ServerConfig(), Implicit: true, Auth: map[string]string{pecAccount: "secret"}})
	s.box = imaptest.Start(t, imaptest.Options{TLS: &cert, User: pecAccount})
	s.out = testPlugin(t, &s.cfg, "ok", nil)
	pw := filepath.Join(t.TempDir(), "pec-password")
	os.WriteFile(pw, []byte("secret\n"), 0o600)
	s.cfg.PEC.Accounts = []relay.PECAccountConfig{{Address: pecAccount, PasswordFile: pw, SMTP: s.provider.Addr, IMAP: s.box.Addr,
		TLSCAFile: cert.CAFile, Poll: relay.Duration(100 * time.Millisecond)}}
	s.cfg.PEC.TrustBundle = s.ca.BundleFile(t)
	return s
}

// sendPEC hands a certified message to the relay as an app would.
func sendPEC(t *testing.T, addr string, rcpts []string, header string) string {
	t.Helper()
	return sendRaw(t, addr, pecAccount, rcpts, fmt.Appendf(nil, "From: Ufficio <%s>\r\nTo: %s\r\n%sSubject: Contratto n. 42\r\n\r\nIn allegato il contratto.\r\n",
		pecAccount, strings.Join(rcpts, ", "), header))
}

func TestPECEndToEnd(t *testing.T) {
	s := newPECSetup(t)
	rl := start(t, s.cfg)
	rcpts := []string{"anna@pec.dest.it", "bruno@pec.dest.it"}
	id := sendPEC(t, rl.r.SMTPAddr().String(), rcpts, "X-Postino-PEC-Receipt: breve\r\n")
	m := waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
	if m.Route != "pec:"+pecAccount {
		t.Errorf("route %q", m.Route)
	}
	delivered := receivedByUpstream(t, s.provider, id)
	if !delivered.TLS || delivered.AuthUser != pecAccount {
		t.Errorf("the provider got the message with TLS %v, AUTH %q", delivered.TLS, delivered.AuthUser)
	}
	if delivered.From != pecAccount || !strings.Contains(delivered.Header("X-TipoRicevuta"), "breve") {
		t.Fatalf("the provider got MAIL FROM %s, X-TipoRicevuta %q", delivered.From, delivered.Header("X-TipoRicevuta"))
	}
	if delivered.Header("X-Postino-PEC-Receipt") != "" {
		t.Error("the control header went out")
	}
	receipt := func(typ pec.Type, consegna string) []byte {
		return s.ca.Receipt(t, pectest.ReceiptOptions{Type: typ, Original: delivered.Data, Consegna: consegna, TipoRicevuta: "breve"})
	}

	acceptance := receipt(pec.Accettazione, "")
	s.box.Append(t, "INBOX", acceptance)
	m = waitStatus(t, rl.client, id, "PEC-ACCEPTED-ACKNOWLEDGED")
	a := waitEvents(t, s.out, id, "PEC-ACCEPTED", 1)[0]
	if p := a.PEC; p == nil || p.ReceiptType != "accettazione" || p.Signature != "valid" || !strings.Contains(p.Signer, pectest.ProviderAddress) ||
		p.Identifier == "" || p.MsgID != m.MessageID || len(p.Recipients) != 2 || p.Recipients[0].Type != "certificato" || p.Source != "both" {
		t.Fatalf("PEC-ACCEPTED event %+v", a.PEC)
	}
	if a.PreviousStatus != "SENT-ACKNOWLEDGED" {
		t.Errorf("previous status %s", a.PreviousStatus)
	}

	// The first delivery receipt does not complete a message to two.
	first := receipt(pec.AvvenutaConsegna, rcpts[0])
	s.box.Append(t, "INBOX", first)
	d1 := waitEvents(t, s.out, id, "PEC-RECIPIENT-DELIVERED", 1)[0]
	if d1.PEC.Delivery != rcpts[0] || d1.PEC.Signature != "valid" {
		t.Errorf("first delivery %+v", d1.PEC)
	}
	// The same receipt again, as a provider may send: recorded once.
	s.box.Append(t, "INBOX", first)
	waitCount(t, memBox{s.box}, "Processed", 3)
	rl.stop()
	if n := len(eventsOf(t, s.out, id, "PEC-RECIPIENT-DELIVERED")); n != 1 {
		t.Errorf("%d events for one delivery receipt", n)
	}
	if n := len(eventsOf(t, s.out, id, "PEC-DELIVERED")); n != 0 {
		t.Fatal("PEC-DELIVERED before the second recipient's receipt")
	}

	// The second, read by the relay after a restart, completes it.
	s.box.Append(t, "INBOX", receipt(pec.AvvenutaConsegna, rcpts[1]))
	rl = start(t, s.cfg)
	m = waitStatus(t, rl.client, id, "PEC-DELIVERED-ACKNOWLEDGED")
	d2 := waitEvents(t, s.out, id, "PEC-DELIVERED", 1)[0]
	if d2.PEC.Delivery != rcpts[1] || d2.PreviousStatus != "PEC-ACCEPTED-ACKNOWLEDGED" {
		t.Errorf("PEC-DELIVERED event %+v, previous %s", d2.PEC, d2.PreviousStatus)
	}
	if got := statuses(m); !strings.HasSuffix(got, "SENT-ACKNOWLEDGED PEC-ACCEPTED CALLING-PEC-ACCEPTED-CALLBACK PEC-ACCEPTED-ACKNOWLEDGED "+
		"PEC-DELIVERED CALLING-PEC-DELIVERED-CALLBACK PEC-DELIVERED-ACKNOWLEDGED") {
		t.Errorf("history %s", got)
	}
	var order []string
	for _, e := range received(t, s.out) {
		if e.MessageID == id {
			order = append(order, e.Outcome)
		}
	}
	if got := strings.Join(order, " "); got != "SENT PEC-ACCEPTED PEC-RECIPIENT-DELIVERED PEC-DELIVERED" {
		t.Errorf("the plugin got %s", got)
	}

	// Evidence: the three receipts, as they came, through the admin API.
	ctx := context.Background()
	list, err := rl.client.Receipts(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Receipts) != 3 {
		t.Fatalf("receipts %+v", list.Receipts)
	}
	var kept bool
	for _, r := range list.Receipts {
		raw, err := rl.client.Receipt(ctx, id, r.Name)
		if err != nil {
			t.Fatal(err)
		}
		kept = kept || bytes.Equal(raw, acceptance)
	}
	if !kept {
		t.Error("the acceptance is not kept byte for byte")
	}
	body := scrape(t, rl)
	for _, want := range []string{`postino_pec_receipts_total{type="avvenuta-consegna",verdict="processed"} 1`,
		`postino_mailbox_up{mailbox="pec ` + pecAccount + `"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grep(body, "pec"))
		}
	}

	// The first delivery receipt read again once the delivery is complete
	// (moved back by an operator, or a new UIDVALIDITY) is the event it was.
	s.box.Append(t, "INBOX", first)
	waitCount(t, memBox{s.box}, "Processed", 5)
	rl.stop()
	if d, r := len(eventsOf(t, s.out, id, "PEC-DELIVERED")), len(eventsOf(t, s.out, id, "PEC-RECIPIENT-DELIVERED")); d != 1 || r != 1 {
		t.Errorf("after reading the first delivery receipt again: %d PEC-DELIVERED and %d PEC-RECIPIENT-DELIVERED events, want 1 and 1", d, r)
	}
}

// TestPECReceiptsOfEveryKind: failures, warnings and forged receipts are
// recorded and reported as what they are.
func TestPECReceiptsOfEveryKind(t *testing.T) {
	s := newPECSetup(t)
	rl := start(t, s.cfg)
	rcpts := []string{"anna@pec.dest.it", "carla@example.org"}
	id := sendPEC(t, rl.r.SMTPAddr().String(), rcpts, "")
	waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
	delivered := receivedByUpstream(t, s.provider, id).Data
	recipients := []pec.Recipient{{Address: rcpts[0], Type: "certificato"}, {Address: rcpts[1], Type: "esterno"}}
	for _, o := range []pectest.ReceiptOptions{
		{Type: pec.Accettazione, DaticertEncoding: "quoted-printable"},
		{Type: pec.PresaInCarico, Consegna: rcpts[0]},
		// A forgery: its signature does not match its content.
		{Type: pec.AvvenutaConsegna, Consegna: rcpts[0], Tamper: true},
		{Type: pec.PreavvisoErroreConsegna, Consegna: rcpts[0], Errore: "no-dest"},
		{Type: pec.ErroreConsegna, Consegna: rcpts[0], Errore: "no-dest", ErroreEsteso: "5.1.1 - casella inesistente"},
	} {
		o.Original, o.Recipients = delivered, recipients
		s.box.Append(t, "INBOX", s.ca.Receipt(t, o))
	}
	m := waitStatus(t, rl.client, id, "PEC-NOT-DELIVERED-ACKNOWLEDGED")
	if strings.Contains(statuses(m), "PEC-DELIVERED") {
		t.Errorf("history %s", statuses(m))
	}
	if p := waitEvents(t, s.out, id, "PEC-TAKEN-IN-CHARGE", 1)[0].PEC; p.ReceiptType != "presa-in-carico" || p.Issuer == "" {
		t.Errorf("presa in carico %+v", p)
	}
	forged := waitEvents(t, s.out, id, "PEC-RECEIPT-INVALID", 1)[0]
	if forged.PEC.Signature != "invalid" || forged.PEC.ReceiptType != "avvenuta-consegna" || !strings.Contains(forged.Reason, "signature invalid") {
		t.Errorf("a tampered receipt is reported as %q: %s", forged.PEC.Signature, forged.Reason)
	}
	if p := waitEvents(t, s.out, id, "PEC-DELIVERY-WARNING", 1)[0].PEC; p.Error != "no-dest" {
		t.Errorf("preavviso %+v", p)
	}
	nd := waitEvents(t, s.out, id, "PEC-NOT-DELIVERED", 1)[0]
	if nd.PEC.Error != "no-dest" || nd.PEC.ErrorDetail != "5.1.1 - casella inesistente" || nd.PEC.Delivery != rcpts[0] ||
		!strings.Contains(nd.Reason, "no-dest") {
		t.Errorf("PEC-NOT-DELIVERED event %+v: %s", nd.PEC, nd.Reason)
	}
	if a := waitEvents(t, s.out, id, "PEC-ACCEPTED", 1)[0].PEC; len(a.Recipients) != 2 || a.Recipients[1].Type != "esterno" {
		t.Errorf("recipients %+v", a.Recipients)
	}
	if list, err := rl.client.Receipts(context.Background(), id); err != nil || len(list.Receipts) != 5 {
		t.Errorf("receipts %+v, %v", list, err)
	}
}

// TestPECSenderMustBeTheAccount: a provider rejects a message whose From
// is not the account, so intake refuses it with the reason.
func TestPECSenderMustBeTheAccount(t *testing.T) {
	s := newPECSetup(t)
	rl := start(t, s.cfg)
	c, err := smtp.Dial(rl.r.SMTPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.SendMail(pecAccount, []string{"anna@pec.dest.it"},
		strings.NewReader("From: someone@example.com\r\nTo: anna@pec.dest.it\r\nSubject: x\r\n\r\nx\r\n"))
	var se *smtp.SMTPError
	if !errors.As(err, &se) || se.Code != 550 || !strings.Contains(se.Message, pecAccount) {
		t.Fatalf("reply %v", err)
	}
}

// TestPECOverdue: a missing acceptance, then a missing delivery receipt,
// each raise one event, so that a lost receipt is noticed.
func TestPECOverdue(t *testing.T) {
	s := newPECSetup(t)
	s.cfg.PEC.AcceptanceTimeout = relay.Duration(300 * time.Millisecond)
	s.cfg.PEC.DeliveryTimeout = relay.Duration(300 * time.Millisecond)
	rl := start(t, s.cfg)
	rcpts := []string{"anna@pec.dest.it", "bruno@pec.dest.it"}
	id := sendPEC(t, rl.r.SMTPAddr().String(), rcpts, "")
	waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
	late := waitEvents(t, s.out, id, "PEC-ACCEPTANCE-OVERDUE", 1)[0]
	if !strings.Contains(late.Reason, "no acceptance receipt") || late.PreviousStatus != "SENT-ACKNOWLEDGED" {
		t.Errorf("overdue event %+v", late)
	}
	delivered := receivedByUpstream(t, s.provider, id).Data
	s.box.Append(t, "INBOX", s.ca.Receipt(t, pectest.ReceiptOptions{Type: pec.Accettazione, Original: delivered}))
	s.box.Append(t, "INBOX", s.ca.Receipt(t, pectest.ReceiptOptions{Type: pec.AvvenutaConsegna, Original: delivered, Consegna: rcpts[0]}))
	waitEvents(t, s.out, id, "PEC-RECIPIENT-DELIVERED", 1)
	d := waitEvents(t, s.out, id, "PEC-DELIVERY-OVERDUE", 1)[0]
	if d.PEC == nil || d.PEC.Delivery != rcpts[1] || !strings.Contains(d.Reason, rcpts[1]) {
		t.Errorf("delivery overdue event %+v %+v", d, d.PEC)
	}
	// Another message that gets no receipt is found late by a check that
	// read the first one again too: still one event each for the first.
	other := sendPEC(t, rl.r.SMTPAddr().String(), rcpts[:1], "")
	waitEvents(t, s.out, other, "PEC-ACCEPTANCE-OVERDUE", 1)
	for _, o := range []string{"PEC-ACCEPTANCE-OVERDUE", "PEC-DELIVERY-OVERDUE"} {
		if n := len(eventsOf(t, s.out, id, o)); n != 1 {
			t.Errorf("%d %s events", n, o)
		}
	}
	m := waitStatus(t, rl.client, id, "PEC-ACCEPTED-ACKNOWLEDGED")
	if strings.Contains(statuses(m), "OVERDUE") {
		t.Errorf("an overdue receipt moved the message: %s", statuses(m))
	}
	body := scrape(t, rl)
	for _, want := range []string{`postino_pec_overdue_total{receipt="acceptance"} 2`, `postino_pec_overdue_total{receipt="delivery"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grep(body, "pec"))
		}
	}
}
