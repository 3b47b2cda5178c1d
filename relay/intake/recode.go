package intake

import (
	"bytes"
	"errors"
	"io"
	"time"

	"github.com/genropy/postino/relay/recode"
)

// recodeDraft replaces the committed draft f of a message with body lines
// over 998 octets by one whose parts holding them are re-encoded
// (relay/recode), and removes f. No upstream has to take such lines, and
// folding them as Postfix does would change the text: re-encoding it here,
// once, before the message is recorded, means that delivery signs and
// sends the same bytes whatever the upstream.
func (s *Server) recodeDraft(id string, f draft, now time.Time) (draft, error) {
	defer f.Abort() // committed, but recorded nowhere: f goes in any case
	open := func() (io.ReadCloser, error) {
		if d, ok := f.(*memDraft); ok {
			return io.NopCloser(bytes.NewReader(d.Bytes())), nil
		}
		return s.spool.Open(f.Path())
	}
	r, err := open()
	if err != nil {
		return nil, tempFailure("Cannot read the message back from the spool", err)
	}
	plan, err := recode.Scan(r, false)
	r.Close()
	if err != nil {
		return nil, recodeError(err)
	}
	return s.writeDraft(id, now, func(w io.Writer) error {
		r, err := open()
		if err != nil {
			return tempFailure("Cannot read the message back from the spool", err)
		}
		defer r.Close()
		if err := plan.Write(w, r); err != nil {
			return recodeError(err)
		}
		return nil
	})
}

// recodeError is the reply to a message whose long lines cannot be
// re-encoded: a fault of the message, unless reading it back failed.
func recodeError(err error) error {
	if errors.Is(err, recode.ErrCannot) {
		return contentError("a body line is longer than %d octets and %v; encode that part as quoted-printable or base64", recode.MaxLine, err)
	}
	return tempFailure("Cannot read the message back from the spool", err)
}
