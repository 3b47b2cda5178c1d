package bounce

import (
	"github.com/genropy/postino/internal/text"
	"net/mail"
	"regexp"
	"strings"
	"time"
)

// field is one "Name: value" field of a delivery-status or feedback
// report, unfolded.
type field struct{ name, value string }

// fields is a group of fields in the order written.
type fields []field

// get returns the first value of the named field.
func (fs fields) get(name string) string {
	for _, f := range fs {
		if strings.EqualFold(f.name, name) {
			return f.value
		}
	}
	return ""
}

// all returns every value of the named field.
func (fs fields) all(name string) []string {
	var vs []string
	for _, f := range fs {
		if strings.EqualFold(f.name, name) {
			vs = append(vs, f.value)
		}
	}
	return vs
}

// has reports whether the named field is there.
func (fs fields) has(name string) bool {
	for _, f := range fs {
		if strings.EqualFold(f.name, name) {
			return true
		}
	}
	return false
}

// readFields reads the field groups of a report body: groups are
// separated by blank lines. A line that is not a field continues the one
// before, as a folded line would: some MTAs forget to indent the rest of a
// long Diagnostic-Code.
func readFields(s string) []fields {
	var groups []fields
	var cur fields
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimRight(line, "\r")
		switch {
		case strings.TrimSpace(line) == "":
			if len(cur) > 0 {
				groups = append(groups, cur)
				cur = nil
			}
		case line[0] == ' ' || line[0] == '\t':
			if len(cur) > 0 {
				cur[len(cur)-1].value = strings.TrimSpace(cur[len(cur)-1].value + " " + strings.TrimSpace(line))
			}
		default:
			name, value, ok := strings.Cut(line, ":")
			if !ok || strings.ContainsAny(strings.TrimSpace(name), " \t") || strings.TrimSpace(name) == "" {
				if len(cur) > 0 {
					cur[len(cur)-1].value += " " + strings.TrimSpace(line)
				}
				continue
			}
			cur = append(cur, field{strings.TrimSpace(name), strings.TrimSpace(value)})
		}
	}
	if len(cur) > 0 {
		groups = append(groups, cur)
	}
	return groups
}

// Fields of the per-message part of a DSN (RFC 3464 section 2.2).
var perMessageFields = map[string]bool{
	"reporting-mta":         true,
	"arrival-date":          true,
	"original-envelope-id":  true,
	"received-from-mta":     true,
	"dsn-gateway":           true,
	"x-postfix-queue-id":    true,
	"x-postfix-sender":      true,
	"x-original-message-id": true,
}

// dsn is a parsed delivery-status body.
type dsn struct {
	message    fields
	recipients []fields
}

// readDSN splits a delivery-status body into its per-message fields and
// its per-recipient groups. Real reports put the groups together without
// blank lines or write Action before Final-Recipient, so a new recipient
// starts at each Final-Recipient (or at an Original-Recipient that does not
// belong to the open one), and per-recipient fields met before it wait for
// it.
func readDSN(s string) dsn {
	var d dsn
	for _, g := range readFields(s) {
		var rs recipientSplit
		for _, f := range g {
			name := strings.ToLower(f.name)
			switch {
			case perMessageFields[name]:
				d.message = append(d.message, f)
			case name == "final-recipient", name == "x-actual-recipient" && !rs.open:
				rs.start(f, rs.cur.has("final-recipient"))
			case name == "original-recipient":
				rs.start(f, rs.cur.has("original-recipient") || rs.cur.has("final-recipient") && rs.cur.has("status"))
			default:
				rs.add(f)
			}
		}
		rs.flush()
		d.recipients = append(d.recipients, rs.done...)
	}
	return d
}

// recipientSplit splits the per-recipient fields of one field group into
// recipients.
type recipientSplit struct {
	done    []fields // the recipients complete
	cur     fields   // the open recipient's fields
	open    bool
	pending fields // fields met while none is open: they are the next one's
}

// start adds f, a field that names a recipient. It closes the open
// recipient first when closes says f is another one's, and opens one with
// the pending fields when none is open.
func (rs *recipientSplit) start(f field, closes bool) {
	if rs.open && closes {
		rs.flush()
	}
	if !rs.open {
		rs.cur, rs.open = rs.pending, true
		rs.pending = nil
	}
	rs.cur = append(rs.cur, f)
}

// add adds a field of a recipient to the open one, or keeps it for the
// next.
func (rs *recipientSplit) add(f field) {
	if rs.open {
		rs.cur = append(rs.cur, f)
	} else {
		rs.pending = append(rs.pending, f)
	}
}

// flush closes the open recipient.
func (rs *recipientSplit) flush() {
	if rs.open {
		rs.done = append(rs.done, rs.cur)
	}
	rs.cur, rs.open = nil, false
}

// typedValue strips the type of a typed DSN value: "rfc822; a@b" is "a@b".
func typedValue(v string) string {
	if t, rest, ok := strings.Cut(v, ";"); ok && !strings.ContainsAny(t, " @<") {
		return strings.TrimSpace(rest)
	}
	return strings.TrimSpace(v)
}

// diagnosticCode splits a Diagnostic-Code into its type and text. The
// text of an SMTP diagnostic is the reply; other types ("X-Unix; 67", a
// local mailer's exit code) keep their type, which is what tells them.
func diagnosticCode(v string) (typ, text string) {
	t, rest, ok := strings.Cut(v, ";")
	if !ok || strings.ContainsAny(t, " @<") {
		return "", strings.TrimSpace(v)
	}
	typ = strings.ToLower(strings.TrimSpace(t))
	if typ == "smtp" {
		return typ, strings.TrimSpace(rest)
	}
	return typ, strings.TrimSpace(t) + "; " + strings.TrimSpace(rest)
}

// dsnAddress reads the address of a Final-Recipient or Original-Recipient.
func dsnAddress(v string) string {
	v = typedValue(v)
	if a := findAddress(v); a != "" {
		return a
	}
	return strings.Trim(v, "<> ")
}

// normAction maps the Action values real reports write onto RFC 3464's.
func normAction(v, status string) string {
	v = strings.ToLower(strings.TrimSpace(v))
	if i := strings.IndexAny(v, " ;("); i >= 0 {
		v = v[:i]
	}
	switch v {
	case "failed", "failure", "fail", "bounced", "bounce":
		return "failed"
	case "delayed", "delay", "deferred":
		return "delayed"
	case "delivered", "relayed", "expanded":
		return v
	case "deliverable":
		// What Postfix's address verification (sendmail -bv) reports.
		return "delivered"
	}
	switch {
	case strings.HasPrefix(status, "2."):
		return "delivered"
	case strings.HasPrefix(status, "4."):
		return "delayed"
	}
	return "failed"
}

// toRecipients turns the per-recipient groups into Recipients, the status
// and the reply code read as preferStatus and replyCodes say.
func (d dsn) toRecipients() []Recipient {
	var rs []Recipient
	for _, g := range d.recipients {
		r := Recipient{
			FinalRecipient:    dsnAddress(g.get("Final-Recipient")),
			OriginalRecipient: dsnAddress(g.get("Original-Recipient")),
			RemoteMTA:         typedValue(g.get("Remote-MTA")),
		}
		diagType, diag := diagnosticCode(g.get("Diagnostic-Code"))
		r.Diagnostic = text.Cut(diag, maxDiagnostic)
		if r.FinalRecipient == "" {
			r.FinalRecipient = dsnAddress(g.get("X-Actual-Recipient"))
		}
		if r.FinalRecipient == "" {
			r.FinalRecipient = r.OriginalRecipient
		}
		if r.FinalRecipient == "" {
			continue
		}
		if r.OriginalRecipient == r.FinalRecipient {
			r.OriginalRecipient = ""
		}
		r.Status = preferStatus(findStatus(g.get("Status")), r.Diagnostic)
		if diagType != "x-unix" && diagType != "x-local" {
			// A local mailer's diagnostic is its exit code, not a reply.
			r.SMTPCode, _ = replyCodes(r.Diagnostic)
		}
		r.Action = normAction(g.get("Action"), r.Status)
		rs = append(rs, r)
	}
	return rs
}

// parseDate reads the dates DSNs carry, which are RFC 5322 dates more or
// less well written.
func parseDate(v string) time.Time {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}
	}
	if t, err := mail.ParseDate(v); err == nil {
		return t
	}
	// Drop a trailing comment or zone name the strict parser refuses.
	if i := strings.LastIndex(v, " ("); i > 0 {
		if t, err := mail.ParseDate(v[:i]); err == nil {
			return t
		}
	}
	return time.Time{}
}

// preferStatus chooses between the Status field and the codes the remote
// server wrote in its reply. The reply wins when it has a specific code:
// reporting MTAs summarise (Sendmail writes 5.1.1 over a "550 5.7.1 IP
// address blacklisted"), and RFC 3463 asks that the code of the actual
// problem be given rather than x.4.7 (delivery time expired). A generic
// Status (x.0.0) gives way to any code of the reply.
func preferStatus(status, diagnostic string) string {
	// Codes paired with a reply code are the remote server's; a code on
	// its own may be the reporting MTA's summary again.
	var codes []string
	for _, m := range replyRe.FindAllStringSubmatchIndex(diagnostic, -1) {
		if codeBoundary(diagnostic, m[4], m[5]) {
			codes = append(codes, diagnostic[m[4]:m[5]])
		}
	}
	for _, loc := range statusRe.FindAllStringIndex(diagnostic, -1) {
		if codeBoundary(diagnostic, loc[0], loc[1]) {
			codes = append(codes, diagnostic[loc[0]:loc[1]])
		}
	}
	for _, c := range codes {
		if !genericStatus(c) && c[1:] != ".4.7" {
			return c
		}
	}
	if len(codes) > 0 && (status == "" || genericStatus(status)) {
		return codes[0]
	}
	return status
}

// genericStatus reports whether s is x.0.0, a class without a subject.
func genericStatus(s string) bool { return len(s) == 5 && s[1:] == ".0.0" }

// dsnInTextRe finds DSN fields in a part that is not labelled as a DSN.
var dsnInTextRe = regexp.MustCompile(`(?im)^(?:final|original)-recipient:`)

// deliveryStatus reads an RFC 3464 report, or DSN fields a text part
// carries without the media type.
func (m *msg) deliveryStatus(rep *Report, bt bounceText) bool {
	var d dsn
	for _, s := range m.status {
		p := readDSN(s)
		d.message = append(d.message, p.message...)
		d.recipients = append(d.recipients, p.recipients...)
	}
	if len(d.recipients) == 0 {
		for _, s := range m.texts {
			if dsnInTextRe.MatchString(s) {
				p := readDSN(s)
				d.message = append(d.message, p.message...)
				d.recipients = append(d.recipients, p.recipients...)
			}
		}
	}
	rs := d.toRecipients()
	if len(rs) == 0 {
		return false
	}
	explanation := text.Cut(bt.explanation(), maxContext)
	rep.ReportingMTA = typedValue(d.message.get("Reporting-MTA"))
	rep.ArrivalDate = parseDate(d.message.get("Arrival-Date"))
	rep.Keys.EnvID = strings.TrimSpace(d.message.get("Original-Envelope-Id"))
	for i := range rs {
		r := &rs[i]
		if b, ok := bt.block(r.FinalRecipient, len(rs)); ok && !validAddress(r.FinalRecipient) && validAddress(b.addr) {
			// "Final-Recipient: rfc822; @mx.example.org": the text
			// names the one recipient.
			r.FinalRecipient = b.addr
		}
		b, hasBlock := bt.block(r.FinalRecipient, len(rs))
		own := strings.Join(b.lines, "\n")
		if r.Diagnostic == "" && hasBlock {
			// The text part often says what the DSN leaves out.
			r.Diagnostic = b.diagnostic()
			code, _ := replyCodes(own)
			if r.SMTPCode == 0 {
				r.SMTPCode = code
			}
			if r.Status == "" || genericStatus(r.Status) {
				r.Status = preferStatus(r.Status, own)
			}
		}
		r.assess(explanation, own)
	}
	rep.Recipients = rs
	rep.Kind = kindOf(rs)
	return true
}

// block returns the text block of a recipient; when the report has a
// single recipient and the text a single block, that one.
func (bt bounceText) block(addr string, n int) (textBlock, bool) {
	for _, b := range bt.blocks {
		if strings.EqualFold(b.addr, addr) {
			return b, true
		}
	}
	if n == 1 && len(bt.blocks) == 1 {
		return bt.blocks[0], true
	}
	return textBlock{}, false
}

// diagnostic is the text of a block as one line.
func (b textBlock) diagnostic() string {
	return text.Cut(joinDiagnostic(b.lines), maxDiagnostic)
}
