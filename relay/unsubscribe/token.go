// Package unsubscribe makes and honours one-click unsubscribe links
// (RFC 8058, RFC 2369): signed tokens naming a stream and a recipient, the
// List-Unsubscribe headers that carry them, the HTTP endpoint they point
// to, and the reading of a token from the subject of an unsubscribe mail.
package unsubscribe

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Target is what a token names: the recipient to unsubscribe from the
// stream, and the message the link came with.
type Target struct {
	Stream    string
	Recipient string
	MessageID string
}

// ErrInvalid is the one error of a token that does not verify, whatever
// the reason (malformed, too long, unknown key, wrong MAC, too old): a
// prober learns nothing from which it is.
var ErrInvalid = errors.New("unsubscribe: the link is not valid or has expired")

// MaxTokenLen bounds a token, in characters. Verification refuses a
// longer one before decoding it, and Token does not make one: the links
// stay short enough for a header line and a URL (see Headers).
const MaxTokenLen = 512

// MinKeyLen is the least key material accepted, in bytes.
const MinKeyLen = 32

const (
	tokenVersion = 1
	keyIDLen     = 4
	// macLen truncates the HMAC-SHA256 to 128 bits (RFC 2104 §5 allows
	// truncation to half the output and no less than 80 bits): forging
	// one still takes about 2^128 guesses, each an online, rate-limited
	// request, while the link is 22 characters shorter.
	macLen = 16
	// minToken is the version, the key id, a one-byte time, three empty
	// fields and the MAC.
	minToken = 1 + keyIDLen + 1 + 3 + macLen
)

type key struct {
	id     [keyIDLen]byte
	secret []byte
}

func newKey(secret []byte) key {
	sum := sha256.Sum256(secret)
	k := key{secret: secret}
	copy(k.id[:], sum[:keyIDLen])
	return k
}

func (k key) mac(payload []byte) []byte {
	m := hmac.New(sha256.New, k.secret)
	m.Write(payload)
	return m.Sum(nil)[:macLen]
}

// Keys sign and verify tokens. The first key signs; every key verifies
// the tokens it signed, an older one only those issued less than the
// grace period ago. Rotation puts a new key first and keeps the old ones
// for the grace period, so that links already sent keep working.
type Keys struct {
	current key
	older   []key
	grace   time.Duration
}

// NewKeys makes Keys from raw key material, the signing key first. Each
// key is at least MinKeyLen bytes; a key's id is the first 4 bytes of its
// SHA-256, so no two keys may be the same.
func NewKeys(grace time.Duration, secrets ...[]byte) (*Keys, error) {
	if len(secrets) == 0 {
		return nil, errors.New("unsubscribe keys: none given: list at least one (the first signs); make one with: head -c 32 /dev/urandom | base64 > key")
	}
	ks := make([]key, 0, len(secrets))
	for i, s := range secrets {
		if len(s) < MinKeyLen {
			return nil, fmt.Errorf("unsubscribe key %d holds %d bytes: at least %d are needed; make one with: head -c 32 /dev/urandom | base64 > key", i+1, len(s), MinKeyLen)
		}
		k := newKey(s)
		for j, o := range ks {
			if o.id == k.id {
				return nil, fmt.Errorf("unsubscribe keys %d and %d are the same key: list each once", j+1, i+1)
			}
		}
		ks = append(ks, k)
	}
	return &Keys{current: ks[0], older: ks[1:], grace: grace}, nil
}

// LoadKeys reads the keys named by sources, the signing key first: each
// "file:/path" (a file only its owner and group may read) or "env:NAME".
// The material is the text with surrounding white space trimmed, used as
// it is (a base64 line is fine).
func LoadKeys(grace time.Duration, sources []string) (*Keys, error) {
	secrets := make([][]byte, 0, len(sources))
	for _, src := range sources {
		s, err := loadKey(src)
		if err != nil {
			return nil, err
		}
		secrets = append(secrets, s)
	}
	return NewKeys(grace, secrets...)
}

func loadKey(src string) ([]byte, error) {
	const how = "make one with: head -c 32 /dev/urandom | base64 > key"
	var text string
	switch kind, name, _ := strings.Cut(src, ":"); kind {
	case "file":
		st, err := os.Stat(name)
		if err != nil {
			return nil, fmt.Errorf("unsubscribe key %s: %w; %s", src, err, how)
		}
		if perm := st.Mode().Perm(); perm&0o007 != 0 {
			return nil, fmt.Errorf("unsubscribe key %s is readable or writable by every user (mode %04o): anyone on this machine could unsubscribe any recipient; run chmod 600 %s (or 640 with the relay's group)", src, perm, name)
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("unsubscribe key %s: %w", src, err)
		}
		text = string(b)
	case "env":
		v, ok := os.LookupEnv(name)
		if !ok {
			return nil, fmt.Errorf("unsubscribe key %s: the variable %s is not set; set it to a key (%s, then its content)", src, name, how)
		}
		text = v
	default:
		return nil, fmt.Errorf("unsubscribe key %q: expected file:/path or env:NAME", src)
	}
	s := []byte(strings.TrimSpace(text))
	if len(s) < MinKeyLen {
		return nil, fmt.Errorf("unsubscribe key %s holds %d bytes: at least %d are needed; %s", src, len(s), MinKeyLen, how)
	}
	return s, nil
}

// Token signs t, issued at the given time, with the current key. It fails
// when the token would be longer than MaxTokenLen.
func (k *Keys) Token(t Target, issued time.Time) (string, error) {
	b := make([]byte, 0, 64+len(t.Stream)+len(t.Recipient)+len(t.MessageID))
	b = append(b, tokenVersion)
	b = append(b, k.current.id[:]...)
	b = binary.AppendUvarint(b, uint64(max(issued.Unix(), 0)))
	for _, f := range []string{t.Stream, t.Recipient, t.MessageID} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	b = append(b, k.current.mac(b)...)
	if base64.RawURLEncoding.EncodedLen(len(b)) > MaxTokenLen {
		return "", fmt.Errorf("unsubscribe token for %s of stream %s: %d bytes of stream, recipient and message id make it longer than %d characters",
			t.Recipient, t.Stream, len(t.Stream)+len(t.Recipient)+len(t.MessageID), MaxTokenLen)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Verify returns the target of token if one of the keys signed it, and
// ErrInvalid otherwise.
func (k *Keys) Verify(token string, now time.Time) (Target, error) {
	t, _, err := k.open(token, now)
	return t, err
}

// open verifies token and returns its target and issue time.
func (k *Keys) open(token string, now time.Time) (Target, time.Time, error) {
	if len(token) > MaxTokenLen || !isBase64URL(token) {
		return Target{}, time.Time{}, ErrInvalid
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil || len(b) < minToken || b[0] != tokenVersion {
		return Target{}, time.Time{}, ErrInvalid
	}
	payload, sum := b[:len(b)-macLen], b[len(b)-macLen:]
	t, issued, ok := parsePayload(payload[1+keyIDLen:])
	if !ok {
		return Target{}, time.Time{}, ErrInvalid
	}
	signer, ok := k.signer(payload[1:1+keyIDLen], issued, now)
	if !ok || !hmac.Equal(signer.mac(payload), sum) {
		return Target{}, time.Time{}, ErrInvalid
	}
	return t, issued, nil
}

// signer is the key named by id, if it may verify a token issued then.
func (k *Keys) signer(id []byte, issued, now time.Time) (key, bool) {
	if string(id) == string(k.current.id[:]) {
		return k.current, true
	}
	for _, o := range k.older {
		if string(id) == string(o.id[:]) {
			return o, now.Sub(issued) < k.grace
		}
	}
	return key{}, false
}

// parsePayload reads the issue time and the three fields, which must
// fill p exactly.
func parsePayload(p []byte) (Target, time.Time, bool) {
	secs, n := binary.Uvarint(p)
	if n <= 0 || secs > 1<<40 {
		return Target{}, time.Time{}, false
	}
	p = p[n:]
	var f [3]string
	for i := range f {
		l, n := binary.Uvarint(p)
		if n <= 0 || l > uint64(len(p)-n) {
			return Target{}, time.Time{}, false
		}
		f[i] = string(p[n : n+int(l)])
		p = p[n+int(l):]
	}
	if len(p) != 0 {
		return Target{}, time.Time{}, false
	}
	return Target{Stream: f[0], Recipient: f[1], MessageID: f[2]}, time.Unix(int64(secs), 0), true
}

func isBase64URL(s string) bool {
	for i := range len(s) {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
