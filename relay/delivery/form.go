package delivery

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/genropy/postino/relay/dkim"
	"github.com/genropy/postino/relay/recode"
)

// form is how a message leaves in one attempt: as spooled, or, for an
// upstream without 8BITMIME, with its 8-bit parts re-encoded as
// quoted-printable (RFC 6152 section 3). Each form is made and signed once
// per attempt, by the first job that needs it, and shared by the others:
// the signature covers the bytes that form sends.
type form struct {
	once sync.Once
	// plan re-encodes the spooled message; nil: it goes as spooled.
	plan   *recode.Plan
	signed *dkim.Result // nil when signing is off
	size   int64
	rep    *Reply // why the message cannot leave in this form
	// prefix holds fields put before the spooled header, signed with it
	// (a bulk message's unsubscribe fields, its recipient's own).
	prefix []byte
}

// form returns the job's form for an upstream that offers 8BITMIME, or
// not (sevenBit).
func (j *job) form(sevenBit bool) *form {
	fm := &j.forms[0]
	if sevenBit {
		fm = &j.forms[1]
	}
	fm.once.Do(func() { j.f.prepare(fm, sevenBit) })
	return fm
}

// prepare plans the form's re-encoding and signs it, or says why the
// message cannot leave: permanent when the policy wants a key the domain
// lacks or the 8-bit octets cannot be re-encoded, temporary otherwise.
func (f *flight) prepare(fm *form, sevenBit bool) {
	fm.size = f.m.Envelope.Size + int64(len(fm.prefix))
	if sevenBit {
		if fm.plan, fm.rep = f.plan7bit(); fm.rep != nil {
			return
		}
	}
	s := f.e.cfg.Signer
	signing := s != nil && s.Enabled()
	if !signing && fm.plan == nil {
		return
	}
	r, err := f.open(fm)
	if err != nil {
		fm.rep = &Reply{Code: 451, Enhanced: "4.3.0", Text: fmt.Sprintf("cannot read the spool file %s to sign it: %v", f.m.EmlPath, err)}
		return
	}
	defer r.Close()
	// The size is counted from what is read: the signer stops after the
	// header when the domain has no key.
	cr := &countingReader{r: r}
	var res dkim.Result
	if signing {
		res, err = s.Sign(cr, f.route.DKIMDomain)
	}
	if err == nil {
		_, err = io.Copy(io.Discard, cr)
	}
	switch {
	case errors.Is(err, dkim.ErrNoKey):
		fm.rep = &Reply{Code: 550, Enhanced: "5.7.0", Text: err.Error()}
	case errors.Is(err, recode.ErrCannot):
		fm.rep = cannot7bit(err)
	case err != nil:
		fm.rep = &Reply{Code: 451, Enhanced: "4.3.0", Text: err.Error()}
	default:
		fm.size = cr.n
		if signing {
			fm.signed = &res
			f.noteSigned(&res, sevenBit)
		}
	}
}

// plan7bit plans the re-encoding of the message's 8-bit parts; nil when
// none is needed after all.
func (f *flight) plan7bit() (*recode.Plan, *Reply) {
	r, err := f.e.spool.Open(f.m.EmlPath)
	if err != nil {
		return nil, &Reply{Code: 451, Enhanced: "4.3.0", Text: err.Error()}
	}
	defer r.Close()
	plan, err := recode.Scan(r, true)
	switch {
	case errors.Is(err, recode.ErrCannot):
		return nil, cannot7bit(err)
	case err != nil:
		return nil, &Reply{Code: 451, Enhanced: "4.3.0", Text: fmt.Sprintf("reading the spool file %s: %v", f.m.EmlPath, err)}
	case !plan.Needed():
		return nil, nil
	}
	return plan, nil
}

func cannot7bit(err error) *Reply {
	return &Reply{Code: 554, Enhanced: "5.6.3", Text: oneLine(fmt.Sprintf("the upstream does not offer 8BITMIME and %v", err))}
}

// open reads the message in the form's bytes.
func (f *flight) open(fm *form) (io.ReadCloser, error) {
	r, err := f.e.spool.Open(f.m.EmlPath)
	if err != nil {
		return nil, err
	}
	if fm.plan != nil {
		r = fm.plan.Reader(r)
	}
	if len(fm.prefix) == 0 {
		return r, nil
	}
	return readCloser{io.MultiReader(bytes.NewReader(fm.prefix), r), r}, nil
}

// readCloser reads a message made of a file and closes the file.
type readCloser struct {
	io.Reader
	io.Closer
}

// noteSigned keeps the signature the history tells of: the first made,
// unless a form sent as spooled comes after one re-encoded.
func (f *flight) noteSigned(res *dkim.Result, sevenBit bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.signed == nil || f.signedSevenBit && !sevenBit {
		f.signed, f.signedSevenBit = res, sevenBit
	}
}

// signature is the history's account of how the message was signed, the
// form sent as spooled first.
func (f *flight) signature() *dkim.Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.signed
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
