package delivery

import (
	"encoding/base64"
	"fmt"
	"io"
	"net/textproto"
	"strconv"
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

// outcome is what the upstream said: a reply per recipient, and the reply
// to the content. A zero Reply means the session ended before that reply.
type outcome struct {
	rcpts []Reply
	data  Reply
}

// verdict is the relay's own refusal, shaped as a reply.
func verdict(code int, enhanced, format string, args ...any) Reply {
	return Reply{Code: code, Enhanced: enhanced, Text: fmt.Sprintf(format, args...)}
}

// precheck refuses, before any command, what the upstream cannot take.
func (c *client) precheck(t *transaction) (Reply, bool) {
	if t.smtputf8 && !c.has("SMTPUTF8") {
		return verdict(554, "5.6.7", "the message needs SMTPUTF8 (UTF-8 addresses or headers), which %s does not offer", c.host), false
	}
	if t.eightBit && !c.has("8BITMIME") {
		return verdict(554, "5.6.3", "the message holds 8-bit data and %s does not offer 8BITMIME", c.host), false
	}
	if limit, err := strconv.ParseInt(c.ext["SIZE"], 10, 64); err == nil && limit > 0 && t.size > limit {
		return verdict(552, "5.3.4", "the message of %d octets is larger than the %d octets %s accepts", t.size, limit, c.host), false
	}
	return Reply{}, true
}

// send runs one transaction. A non-nil error means the session is lost;
// the replies received before that are in the outcome.
func (c *client) send(t *transaction) (outcome, error) {
	out := outcome{rcpts: make([]Reply, len(t.rcpts))}
	if v, ok := c.precheck(t); !ok {
		for i := range out.rcpts {
			out.rcpts[i] = v
		}
		return out, nil
	}
	mail := fmt.Sprintf("MAIL FROM:<%s>", t.from)
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
	pipelined := c.has("PIPELINING")

	// Write what may go at once: everything when pipelining, else one
	// command at a time.
	write := func(line string) error {
		fmt.Fprintf(c.w, "%s\r\n", line)
		if pipelined {
			return nil
		}
		return c.w.Flush()
	}
	flush := func() error {
		if err := c.w.Flush(); err != nil {
			c.broken = true
			return err
		}
		return nil
	}
	lost := func(err error) (outcome, error) {
		c.broken = true
		return out, err
	}

	if t.reset {
		if err := write("RSET"); err != nil {
			return lost(err)
		}
		if !pipelined {
			if rep, err := c.read(c.timeouts.Command); err != nil {
				return lost(err)
			} else if !rep.ok() {
				return lost(&replyError{rep, "RSET"})
			}
		}
	}
	if err := write(mail); err != nil {
		return lost(err)
	}
	if pipelined {
		for _, r := range t.rcpts {
			write("RCPT TO:<" + r + ">")
		}
		write("DATA")
		if err := flush(); err != nil {
			return lost(err)
		}
		if t.reset {
			if rep, err := c.read(c.timeouts.Command); err != nil {
				return lost(err)
			} else if !rep.ok() {
				return lost(&replyError{rep, "RSET"})
			}
		}
	}

	mailRep, err := c.read(c.timeouts.Command)
	if err != nil {
		return lost(err)
	}
	accepted := 0
	for i, r := range t.rcpts {
		if !pipelined {
			if !mailRep.ok() {
				break
			}
			if err := write("RCPT TO:<" + r + ">"); err != nil {
				return lost(err)
			}
		}
		rep, err := c.read(c.timeouts.Command)
		if err != nil {
			return lost(err)
		}
		out.rcpts[i] = rep
		if rep.ok() && mailRep.ok() {
			accepted++
		}
	}
	if !mailRep.ok() {
		// The sender was refused: so is every recipient.
		for i := range out.rcpts {
			out.rcpts[i] = mailRep
		}
		if pipelined {
			if rep, err := c.read(c.timeouts.DataInit); err != nil {
				return lost(err)
			} else if rep.Code == 354 {
				return c.emptyData(out)
			}
		}
		return out, nil
	}
	var dataRep Reply
	if pipelined {
		if dataRep, err = c.read(c.timeouts.DataInit); err != nil {
			return lost(err)
		}
	} else if accepted > 0 {
		if err := write("DATA"); err != nil {
			return lost(err)
		}
		if dataRep, err = c.read(c.timeouts.DataInit); err != nil {
			return lost(err)
		}
	}
	if accepted == 0 {
		if dataRep.Code == 354 {
			return c.emptyData(out)
		}
		return out, nil
	}
	if dataRep.Code != 354 {
		out.data = dataRep
		return out, nil
	}

	dw := textproto.NewWriter(c.w).DotWriter()
	if _, err := io.Copy(dw, t.body); err != nil {
		return lost(fmt.Errorf("sending the content: %w", err))
	}
	if err := dw.Close(); err != nil {
		return lost(fmt.Errorf("sending the content: %w", err))
	}
	if out.data, err = c.read(c.timeouts.DataEnd); err != nil {
		return lost(fmt.Errorf("waiting for the reply to the content: %w", err))
	}
	return out, nil
}

// emptyData ends a DATA that a pipelining server accepted although no
// recipient was: RFC 2920 asks for a lone dot, whose reply is moot.
func (c *client) emptyData(out outcome) (outcome, error) {
	fmt.Fprint(c.w, ".\r\n")
	if err := c.w.Flush(); err != nil {
		c.broken = true
		return out, err
	}
	if _, err := c.read(c.timeouts.DataEnd); err != nil {
		return out, err
	}
	return out, nil
}
