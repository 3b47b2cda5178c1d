package pec

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/emersion/go-message"
	"github.com/emersion/go-message/mail"
	"github.com/emersion/go-message/textproto"
)

// Bounds on the work one message can cause. Past them the walk stops
// descending or reading rather than failing: what lies beyond is never
// what a receipt is read for.
const (
	maxDepth        = 16
	maxParts        = 1000
	maxDaticertSize = 1 << 20
	maxTextSize     = 64 << 10
)

// contents holds the parts of a message a receipt is read from.
type contents struct {
	hasDaticert bool
	// daticert is the transfer-decoded daticert.xml; daticertUTF8 says the
	// MIME layer already turned its charset into UTF-8.
	daticert     []byte
	daticertUTF8 bool
	daticertErr  error
	// attached is the header of the first message/rfc822 part: the
	// postacert.eml of envelopes and complete delivery receipts.
	attached *mail.Header
	// text is the first text/plain part, the provider's own words.
	text string
}

// collect walks the MIME tree of e. It does not descend into attached
// messages: a daticert.xml inside postacert.eml belongs to some other
// exchange.
func collect(e *message.Entity) *contents {
	c := new(contents)
	budget := maxParts
	c.walk(e, 0, &budget)
	return c
}

func (c *contents) walk(e *message.Entity, depth int, budget *int) {
	if *budget--; *budget < 0 {
		return
	}
	if mr := e.MultipartReader(); mr != nil {
		if depth >= maxDepth {
			return
		}
		for *budget >= 0 {
			p, err := mr.NextPart()
			if p == nil || (err != nil && !softError(err)) {
				return
			}
			c.walk(p, depth+1, budget)
		}
		return
	}

	mediaType, params, _ := e.Header.ContentType()
	switch {
	case isDaticert(e.Header, params):
		if c.hasDaticert {
			return
		}
		c.hasDaticert = true
		c.daticert, c.daticertErr = readAtMost(e.Body, maxDaticertSize)
		c.daticertUTF8 = strings.HasPrefix(mediaType, "text/") && params["charset"] != ""
	case mediaType == "message/rfc822":
		if c.attached != nil {
			return
		}
		inner, err := message.Read(e.Body)
		if err != nil && !softError(err) {
			return
		}
		c.attached = &mail.Header{Header: inner.Header}
	case mediaType == "text/plain":
		if c.text != "" {
			return
		}
		// A text cut at the bound still holds its first lines, which is
		// where the identificativo is.
		b, _ := io.ReadAll(io.LimitReader(e.Body, maxTextSize))
		c.text = string(b)
	}
}

// unwrap looks inside a message that is not signed for a receipt a mailing
// list or a forward put there: the first part that is signed (Wrapped: a
// list kept the receipt's header and made its signed body a part), or the
// first attached message that is signed and marked as PEC (Forwarded). It
// returns the part, header included, or the attached message. An attached
// message counts only when the outer message is not itself marked by a
// provider (marked): then it is the postacert.eml of an envelope.
func unwrap(raw []byte, marked bool) (how string, part []byte) {
	e, err := message.Read(bytes.NewReader(raw))
	if err != nil && !softError(err) {
		return "", nil
	}
	budget := maxParts
	return findSigned(e, 0, marked, &budget)
}

func findSigned(e *message.Entity, depth int, marked bool, budget *int) (string, []byte) {
	mr := e.MultipartReader()
	if mr == nil || depth >= maxDepth {
		return "", nil
	}
	for ; *budget > 0; *budget-- {
		p, err := mr.NextPart()
		if p == nil || (err != nil && !softError(err)) {
			return "", nil
		}
		if isSigned(p.Header) {
			// The part comes transfer-decoded (an opaque signature is in
			// base64): its header must say so.
			h := p.Header.Copy()
			h.Del("Content-Transfer-Encoding")
			var buf bytes.Buffer
			if textproto.WriteHeader(&buf, h.Header) != nil {
				return "", nil
			}
			if _, err := io.Copy(&buf, p.Body); err != nil {
				return "", nil
			}
			return Wrapped, buf.Bytes()
		}
		if t, _, _ := p.Header.ContentType(); t == "message/rfc822" {
			if marked {
				continue
			}
			if inner, ok := signedPEC(p.Body); ok {
				return Forwarded, inner
			}
			continue
		}
		if how, part := findSigned(p, depth+1, marked, budget); how != "" {
			return how, part
		}
	}
	return "", nil
}

// signedPEC reads an attached message and reports whether it is signed and
// marked as PEC.
func signedPEC(r io.Reader) ([]byte, bool) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, false
	}
	e, err := message.Read(bytes.NewReader(raw))
	if err != nil && !softError(err) {
		return nil, false
	}
	return raw, isSigned(e.Header) && looksLikePEC(mail.Header{Header: e.Header})
}

// isDaticert reports whether a part is the daticert.xml attachment, named
// either in Content-Disposition or, by older providers, in Content-Type.
func isDaticert(h message.Header, ctParams map[string]string) bool {
	_, dispParams, _ := h.ContentDisposition()
	for _, name := range []string{dispParams["filename"], ctParams["name"]} {
		if strings.EqualFold(strings.TrimSpace(name), "daticert.xml") {
			return true
		}
	}
	return false
}

// readAtMost reads r to the end, refusing more than limit bytes.
func readAtMost(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading: %w", err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, nil
}
