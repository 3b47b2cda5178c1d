package delivery

import (
	"encoding/base64"
	"fmt"
	"io"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

func encode64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func decode64(r Reply) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(r.Text)
	if err != nil {
		return nil, fmt.Errorf("AUTH challenge %q is not base64", r.Text)
	}
	return b, nil
}

// transaction is one message to some recipients over an open session.
type transaction struct {
	from     string
	rcpts    []string
	size     int64
	smtputf8 bool
	eightBit bool
	body     io.Reader
	// envID goes to an upstream that offers DSN as ENVID, so that a bounce
	// names the message even without its headers.
	envID string
	// reset says RSET first: the session carried an earlier message.
	reset bool
}

// replies is what the upstream said: a reply per recipient, and the reply
// to the content. A zero Reply means the session ended before that reply.
type replies struct {
	rcpts []Reply
	data  Reply
}

// verdict is the relay's own refusal, shaped as a reply.
func verdict(code int, enhanced, format string, args ...any) Reply {
	return Reply{Code: code, Enhanced: enhanced, Text: fmt.Sprintf(format, args...)}
}

// precheck refuses, before any command, what the upstream cannot take.
func (c *client) precheck(t *transaction) (Reply, bool) {
	if v, ok := checkEnvelope(t); !ok {
		return v, false
	}
	if t.smtputf8 && !c.has("SMTPUTF8") {
		return verdict(554, "5.6.7", "the message needs SMTPUTF8 (UTF-8 addresses or headers), which %s does not offer", c.host), false
	}
	if limit, err := strconv.ParseInt(c.ext["SIZE"], 10, 64); err == nil && limit > 0 && t.size > limit {
		return verdict(552, "5.3.4", "the message of %d octets is larger than the %d octets %s accepts", t.size, limit, c.host), false
	}
	return Reply{}, true
}

// checkEnvelope refuses addresses that no command line may carry: a control
// character (a bare CR can end the line at the upstream, and what follows
// is read as a command of its own). Intake refuses them; this guards
// against rows from anywhere else, an adopted outbox among them. The
// whole message is refused, its other recipients included: it could only
// have been queued by a path that checked nothing.
func checkEnvelope(t *transaction) (Reply, bool) {
	if strings.ContainsFunc(t.from, unicode.IsControl) {
		return verdict(553, "5.1.7", "the sender address %q holds a control character; no SMTP command may carry it", t.from), false
	}
	for _, r := range t.rcpts {
		if strings.ContainsFunc(r, unicode.IsControl) {
			return verdict(553, "5.1.3", "the recipient address %q holds a control character; no SMTP command may carry it", r), false
		}
	}
	return Reply{}, true
}

// send runs one transaction. A non-nil error means the session is lost;
// the replies received before that are in the replies.
func (c *client) send(t *transaction) (replies, error) {
	out := replies{rcpts: make([]Reply, len(t.rcpts))}
	if v, ok := c.precheck(t); !ok {
		fill(out.rcpts, v)
		return out, nil
	}
	var err error
	if c.has("PIPELINING") {
		err = c.sendPipelined(t, &out)
	} else {
		err = c.sendSerial(t, &out)
	}
	if err != nil {
		c.broken = true
	}
	return out, err
}

// mailCommand is the MAIL FROM line, with the parameters the transaction
// needs and the upstream offers.
func (c *client) mailCommand(t *transaction) string {
	mail := "MAIL FROM:" + envelopePath(t.from)
	if t.eightBit {
		mail += " BODY=8BITMIME"
	}
	if c.has("SIZE") && t.size > 0 {
		mail += fmt.Sprintf(" SIZE=%d", t.size)
	}
	if t.smtputf8 {
		mail += " SMTPUTF8"
	}
	if t.envID != "" && c.has("DSN") {
		// Message ids are letters, digits, '.', '_' and '-': xtext as they
		// are (RFC 3461 section 4). Headers only come back: they carry
		// X-Genro-Mail-ID, and the app has the body.
		mail += " RET=HDRS ENVID=" + t.envID
	}
	return mail
}

func rcptCommand(addr string) string { return "RCPT TO:" + envelopePath(addr) }

// envelopePath is addr as a command carries it. Intake keeps a quoted
// local part without its quotes (go-smtp takes them off): "john
// doe"@example.com is stored as john doe@example.com. Written back as it
// is, the space, or a '>' followed by parameters, would be read by the
// upstream as the end of the address, so a local part that is not a
// dot-string is quoted again (RFC 5321 section 4.1.2).
func envelopePath(addr string) string {
	at := strings.LastIndexByte(addr, '@')
	if at < 0 || isDotString(addr[:at]) {
		return "<" + addr + ">"
	}
	var b strings.Builder
	b.WriteString(`<"`)
	for _, r := range addr[:at] {
		if r == '"' || r == '\\' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteString(`"`)
	b.WriteString(addr[at:])
	b.WriteString(">")
	return b.String()
}

// isDotString reports whether local needs no quotes: atoms of atext, or
// of UTF-8 beyond ASCII (RFC 6531), joined by single dots.
func isDotString(local string) bool {
	for _, atom := range strings.Split(local, ".") {
		if atom == "" {
			return false
		}
		for _, r := range atom {
			if r < 0x80 && !isAtext(byte(r)) {
				return false
			}
		}
	}
	return true
}

func isAtext(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-/=?^_`{|}~", c) >= 0
}

// line buffers one command; it leaves when the writer is flushed.
func (c *client) line(s string) { fmt.Fprintf(c.w, "%s\r\n", s) }

// fill gives every recipient the same reply, one about the message (the
// sender refused, or the whole message): it says nothing of any address.
func fill(rcpts []Reply, rep Reply) {
	rep.ofMessage = true
	for i := range rcpts {
		rcpts[i] = rep
	}
}

// anyOK reports whether a recipient was accepted.
func anyOK(rcpts []Reply) bool {
	return slices.ContainsFunc(rcpts, Reply.ok)
}

// expectOK reads the reply to step within d; anything but a success ends
// the session.
func (c *client) expectOK(d time.Duration, step string) error {
	rep, err := c.read(d)
	if err != nil {
		return err
	}
	if !rep.ok() {
		return &replyError{rep, step}
	}
	return nil
}

// sendPipelined writes every command up to DATA at once (RFC 2920), then
// reads their replies in order.
func (c *client) sendPipelined(t *transaction, out *replies) error {
	if err := c.pipeline(t); err != nil {
		return err
	}
	if t.reset {
		if err := c.expectOK(c.timeouts.Command, "RSET"); err != nil {
			return err
		}
	}
	mailRep, err := c.read(c.timeouts.Command)
	if err != nil {
		return err
	}
	for i := range t.rcpts {
		if out.rcpts[i], err = c.read(c.timeouts.Command); err != nil {
			return err
		}
	}
	if !mailRep.ok() {
		// The sender was refused: so is every recipient.
		fill(out.rcpts, mailRep)
	}
	dataRep, err := c.read(c.timeouts.DataInit)
	if err != nil {
		return err
	}
	if !anyOK(out.rcpts) {
		if dataRep.Code == 354 {
			return c.emptyData()
		}
		return nil
	}
	return c.content(t, out, dataRep)
}

// pipeline sends at once every command of the transaction up to DATA.
func (c *client) pipeline(t *transaction) error {
	if t.reset {
		c.line("RSET")
	}
	c.line(c.mailCommand(t))
	for _, r := range t.rcpts {
		c.line(rcptCommand(r))
	}
	c.line("DATA")
	return c.w.Flush()
}

// sendSerial says one command at a time and reads its reply before the
// next.
func (c *client) sendSerial(t *transaction, out *replies) error {
	if t.reset {
		c.line("RSET")
		if err := c.w.Flush(); err != nil {
			return err
		}
		if err := c.expectOK(c.timeouts.Command, "RSET"); err != nil {
			return err
		}
	}
	mailRep, err := c.cmd(c.timeouts.Command, "%s", c.mailCommand(t))
	if err != nil {
		return err
	}
	if !mailRep.ok() {
		// The sender was refused: so is every recipient.
		fill(out.rcpts, mailRep)
		return nil
	}
	for i, r := range t.rcpts {
		if out.rcpts[i], err = c.cmd(c.timeouts.Command, "%s", rcptCommand(r)); err != nil {
			return err
		}
	}
	if !anyOK(out.rcpts) {
		return nil
	}
	dataRep, err := c.cmd(c.timeouts.DataInit, "DATA")
	if err != nil {
		return err
	}
	return c.content(t, out, dataRep)
}

// content sends the message once DATA was answered, and reads the reply to
// it; a DATA refused is the reply to the content.
func (c *client) content(t *transaction, out *replies, dataRep Reply) error {
	if dataRep.Code != 354 {
		out.data = dataRep
		return nil
	}
	dw := textproto.NewWriter(c.w).DotWriter()
	if _, err := io.Copy(dw, t.body); err != nil {
		return fmt.Errorf("sending the content: %w", err)
	}
	if err := dw.Close(); err != nil {
		return fmt.Errorf("sending the content: %w", err)
	}
	var err error
	if out.data, err = c.read(c.timeouts.DataEnd); err != nil {
		return fmt.Errorf("waiting for the reply to the content: %w", err)
	}
	return nil
}

// emptyData ends a DATA that a pipelining server accepted although no
// recipient was: RFC 2920 asks for a lone dot, whose reply is moot.
func (c *client) emptyData() error {
	c.line(".")
	if err := c.w.Flush(); err != nil {
		return err
	}
	_, err := c.read(c.timeouts.DataEnd)
	return err
}
