// Package dkim signs outgoing messages (RFC 6376, RSA and Ed25519 after
// RFC 8463) with go-msgauth: the keys per signing domain, the policy (which
// headers, canonicalisation, expiry), key files, key generation and the
// check of a published record.
package dkim

import (
	"bufio"
	"bytes"
	"crypto"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/emersion/go-message"
	_ "github.com/emersion/go-message/charset"
	"github.com/emersion/go-message/mail"
	"github.com/emersion/go-message/textproto"
	msgdkim "github.com/emersion/go-msgauth/dkim"
	"golang.org/x/net/idna"
)

// ErrNoKey: the message's signing domain has no active key and the policy
// requires a signature.
var ErrNoKey = errors.New("no DKIM key for the signing domain")

// Policy is how messages are signed.
type Policy struct {
	// Canonicalization is header/body: relaxed/relaxed, simple/simple, ...
	Canonicalization string
	// Headers are signed where the message has them.
	Headers []string
	// Oversign are signed once more than the message has them, so that a
	// copy with an added field fails verification.
	Oversign []string
	// Expiry, when not 0, sets x= that long after signing.
	Expiry time.Duration
	// Required makes a message whose domain has no key fail instead of
	// going out unsigned.
	Required bool
}

// DefaultPolicy signs relaxed/relaxed what identifies the message, its
// author and its content, and the one-click unsubscribe fields (RFC 8058
// wants both covered).
func DefaultPolicy() Policy {
	return Policy{
		Canonicalization: "relaxed/relaxed",
		Headers: []string{"From", "Sender", "Reply-To", "To", "Cc", "Subject", "Date", "Message-ID",
			"In-Reply-To", "References", "MIME-Version", "Content-Type", "Content-Transfer-Encoding",
			"Content-Disposition", "List-Unsubscribe", "List-Unsubscribe-Post", "List-Id", "X-Genro-Mail-ID"},
		Oversign: []string{"From", "Subject", "To", "Date"},
	}
}

// KeySpec names a key file in the configuration.
type KeySpec struct {
	Domain   string
	Selector string
	File     string
	// Active keys sign; an inactive one is loaded (so that a broken file is
	// found before it is needed) and can be checked against DNS.
	Active bool
}

// Key is a loaded private key.
type Key struct {
	Domain   string // A-label, lower case
	Selector string
	File     string
	Active   bool
	Signer   crypto.Signer
}

// Algorithm is the key's k= value: rsa or ed25519.
func (k *Key) Algorithm() string {
	if _, ok := k.Signer.Public().(ed25519.PublicKey); ok {
		return "ed25519"
	}
	return "rsa"
}

// Keyring is a policy and the keys it signs with; it does not change once
// built, so that a reload swaps a whole keyring.
type Keyring struct {
	policy    Policy
	headerCan msgdkim.Canonicalization
	bodyCan   msgdkim.Canonicalization
	oversign  map[string]bool
	keys      []*Key
	active    map[string][]*Key
}

// Load reads every key file and checks the policy. An error names the file
// or the setting at fault.
func Load(p Policy, specs []KeySpec) (*Keyring, error) {
	r, err := newKeyring(p)
	if err != nil {
		return nil, err
	}
	for _, s := range specs {
		domain, err := Domain(s.Domain)
		if err != nil {
			return nil, fmt.Errorf("dkim key %s: %w", s.File, err)
		}
		if s.Selector == "" || strings.ContainsAny(s.Selector, " ;=") {
			return nil, fmt.Errorf("dkim key %s: selector %q must be a DNS label", s.File, s.Selector)
		}
		if r.Key(domain, s.Selector) != nil {
			return nil, fmt.Errorf("dkim: selector %s of %s is given twice", s.Selector, domain)
		}
		signer, err := LoadKey(s.File)
		if err != nil {
			return nil, err
		}
		if err := r.add(&Key{Domain: domain, Selector: s.Selector, File: s.File, Active: s.Active, Signer: signer}); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func newKeyring(p Policy) (*Keyring, error) {
	hc, bc, ok := strings.Cut(p.Canonicalization, "/")
	if !ok {
		bc = string(msgdkim.CanonicalizationSimple)
	}
	for _, c := range []string{hc, bc} {
		if c != string(msgdkim.CanonicalizationRelaxed) && c != string(msgdkim.CanonicalizationSimple) {
			return nil, fmt.Errorf("dkim.canonicalization %q: use relaxed/relaxed, relaxed/simple, simple/relaxed or simple/simple", p.Canonicalization)
		}
	}
	if !slices.ContainsFunc(p.Headers, func(h string) bool { return strings.EqualFold(h, "From") }) {
		return nil, errors.New("dkim.headers must include From (RFC 6376 section 5.4)")
	}
	if p.Expiry < 0 {
		return nil, errors.New("dkim.expiry cannot be negative")
	}
	r := &Keyring{policy: p, headerCan: msgdkim.Canonicalization(hc), bodyCan: msgdkim.Canonicalization(bc),
		oversign: map[string]bool{}, active: map[string][]*Key{}}
	for _, h := range p.Oversign {
		r.oversign[strings.ToLower(h)] = true
	}
	return r, nil
}

// add files a key; of each algorithm one key per domain is active.
func (r *Keyring) add(k *Key) error {
	r.keys = append(r.keys, k)
	if !k.Active {
		return nil
	}
	for _, other := range r.active[k.Domain] {
		if other.Algorithm() == k.Algorithm() {
			return fmt.Errorf("dkim: %s has two active %s keys (selectors %s and %s): one of each algorithm signs; mark the other active: false",
				k.Domain, k.Algorithm(), other.Selector, k.Selector)
		}
	}
	r.active[k.Domain] = append(r.active[k.Domain], k)
	return nil
}

// Domain is the form of a domain name that keys are filed under and d=
// carries: lower case, internationalised names as A-labels.
func Domain(name string) (string, error) {
	a, err := idna.Lookup.ToASCII(strings.TrimSuffix(strings.TrimSpace(name), "."))
	if err != nil || a == "" {
		return "", fmt.Errorf("domain %q is not a valid domain name", name)
	}
	return strings.ToLower(a), nil
}

// Keys are all the keys, active or not, in configuration order.
func (r *Keyring) Keys() []*Key { return r.keys }

// Key finds a key by domain and selector.
func (r *Keyring) Key(domain, selector string) *Key {
	d, err := Domain(domain)
	if err != nil {
		return nil
	}
	for _, k := range r.keys {
		if k.Domain == d && k.Selector == selector {
			return k
		}
	}
	return nil
}

// Result says how one message was signed.
type Result struct {
	// Fields are the DKIM-Signature fields to put before the message,
	// each ending in CRLF; empty when unsigned.
	Fields string
	// Domain is the signing domain looked for; empty when the message's
	// From has no domain.
	Domain string
	// Signed lists selector and algorithm of each signature made.
	Signed []string
}

// String is the account for the history.
func (r Result) String() string {
	switch {
	case len(r.Signed) > 0:
		return fmt.Sprintf("DKIM-signed d=%s %s", r.Domain, strings.Join(r.Signed, ", "))
	case r.Domain == "":
		return "not DKIM-signed: the From header has no domain"
	}
	return "not DKIM-signed: no key for " + r.Domain
}

// Signer signs with the keyring in force; Swap puts another in force
// without stopping anyone. It is safe for concurrent use.
type Signer struct {
	ring    atomic.Pointer[Keyring]
	metrics *Metrics
}

// NewSigner signs with r; m may be nil.
func NewSigner(r *Keyring, m *Metrics) *Signer {
	s := &Signer{metrics: m}
	s.ring.Store(r)
	return s
}

// Swap puts r in force for the messages signed from now on.
func (s *Signer) Swap(r *Keyring) { s.ring.Store(r) }

// Keyring is the keyring in force.
func (s *Signer) Keyring() *Keyring { return s.ring.Load() }

// Enabled reports whether any key is configured: without keys the relay
// neither signs nor says in each history that it did not.
func (s *Signer) Enabled() bool {
	r := s.ring.Load()
	return len(r.keys) > 0 || r.policy.Required
}

// Sign reads a message and returns the signatures to prepend. domain, when
// not empty, is the signing domain; otherwise the From header's domain is.
// A message whose domain has no active key comes back unsigned, or with
// ErrNoKey when the policy requires a signature.
func (s *Signer) Sign(r io.Reader, domain string) (Result, error) {
	ring := s.ring.Load()
	br := bufio.NewReaderSize(r, 32<<10)
	raw, h, err := readHeader(br)
	if err != nil {
		return Result{}, err
	}
	if domain == "" {
		domain = fromDomain(h)
	}
	res := Result{}
	if domain != "" {
		if res.Domain, err = Domain(domain); err != nil {
			res.Domain = domain
		}
	}
	keys := ring.active[res.Domain]
	if len(keys) == 0 {
		if s.metrics != nil {
			s.metrics.unsigned.Inc()
		}
		if ring.policy.Required {
			return res, fmt.Errorf("%w %q, and dkim.required is set: add a key for it (postino dkim keygen) or name a signing domain on the route (dkim_domain)", ErrNoKey, res.Domain)
		}
		return res, nil
	}
	res, err = ring.sign(res, keys, raw, h, br)
	if s.metrics != nil {
		s.metrics.record(res, keys, err)
	}
	return res, err
}

func (r *Keyring) sign(res Result, keys []*Key, raw []byte, h textproto.Header, body io.Reader) (Result, error) {
	headerKeys := r.headerKeys(h)
	var expires time.Time
	if r.policy.Expiry > 0 {
		expires = time.Now().Add(r.policy.Expiry)
	}
	signers := make([]*msgdkim.Signer, 0, len(keys))
	writers := make([]io.Writer, 0, len(keys))
	defer func() {
		for _, s := range signers {
			s.Close()
		}
	}()
	for _, k := range keys {
		s, err := msgdkim.NewSigner(&msgdkim.SignOptions{Domain: k.Domain, Selector: k.Selector, Signer: k.Signer,
			HeaderCanonicalization: r.headerCan, BodyCanonicalization: r.bodyCan, HeaderKeys: headerKeys, Expiration: expires})
		if err != nil {
			return res, fmt.Errorf("DKIM key %s (%s): %w", k.Selector, k.File, err)
		}
		signers = append(signers, s)
		writers = append(writers, s)
	}
	w := io.MultiWriter(writers...)
	if _, err := w.Write(raw); err != nil {
		return res, fmt.Errorf("DKIM signing: %w", err)
	}
	if _, err := io.Copy(w, body); err != nil {
		return res, fmt.Errorf("DKIM signing: reading the message: %w", err)
	}
	var fields strings.Builder
	for i, s := range signers {
		if err := s.Close(); err != nil {
			return res, fmt.Errorf("DKIM signing with %s: %w", keys[i].Selector, err)
		}
		fields.WriteString(s.Signature())
		res.Signed = append(res.Signed, fmt.Sprintf("s=%s (%s-sha256)", keys[i].Selector, keys[i].Algorithm()))
	}
	res.Fields = fields.String()
	return res, nil
}

// headerKeys lists the fields to sign: each configured one as many times as
// the message has it, once more when it is over-signed.
func (r *Keyring) headerKeys(h textproto.Header) []string {
	var keys []string
	for _, name := range r.policy.Headers {
		n := len(h.Values(name))
		if r.oversign[strings.ToLower(name)] {
			n++
		}
		for range n {
			keys = append(keys, name)
		}
	}
	return keys
}

// readHeader returns the header section exactly as written, to be signed
// byte for byte as it leaves, and parsed.
func readHeader(br *bufio.Reader) ([]byte, textproto.Header, error) {
	var raw []byte
	for partial := false; ; {
		line, err := br.ReadSlice('\n')
		raw = append(raw, line...)
		if errors.Is(err, bufio.ErrBufferFull) {
			partial = true
			continue
		}
		if err == io.EOF {
			break // a message without a body
		}
		if err != nil {
			return nil, textproto.Header{}, fmt.Errorf("DKIM signing: reading the header: %w", err)
		}
		if !partial && len(bytes.TrimRight(line, "\r\n")) == 0 {
			break
		}
		partial = false
	}
	h, err := textproto.ReadHeader(bufio.NewReader(bytes.NewReader(raw)))
	if err != nil {
		return nil, textproto.Header{}, fmt.Errorf("DKIM signing: the header is malformed: %w", err)
	}
	return raw, h, nil
}

// fromDomain is the domain of the first From address.
func fromDomain(h textproto.Header) string {
	addrs, err := (&mail.Header{Header: message.Header{Header: h}}).AddressList("From")
	if err != nil || len(addrs) == 0 {
		return ""
	}
	at := strings.LastIndexByte(addrs[0].Address, '@')
	if at < 0 {
		return ""
	}
	return addrs[0].Address[at+1:]
}
