package dkim

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"

	msgdkim "github.com/emersion/go-msgauth/dkim"
)

// Verification is the verdict on one DKIM signature of a message.
type Verification struct {
	Domain   string // d=
	Selector string // s=
	// Err is nil when the signature verifies.
	Err error
}

// Result names the verdict as RFC 8601 does: pass, fail (the signature or
// the body hash does not match), permerror (no usable key, a malformed
// signature) or temperror (the lookup failed for now).
func (v Verification) Result() string {
	switch {
	case v.Err == nil:
		return "pass"
	case msgdkim.IsTempFail(v.Err):
		return "temperror"
	case msgdkim.IsPermFail(v.Err):
		return "permerror"
	}
	return "fail"
}

// Verify checks every DKIM signature of msg as a receiver would, with
// go-msgauth, the keys' records answered by lookup. A message without
// signatures has no verifications.
func Verify(ctx context.Context, msg []byte, lookup LookupTXT) ([]Verification, error) {
	_, h, err := readHeader(bufio.NewReader(bytes.NewReader(msg)))
	if err != nil {
		return nil, err
	}
	verifs, err := msgdkim.VerifyWithOptions(bytes.NewReader(msg), &msgdkim.VerifyOptions{
		LookupTXT: func(name string) ([]string, error) { return lookup(ctx, name) },
	})
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	// go-msgauth gives one verification per DKIM-Signature field, in the
	// header's order, without the selector.
	fields := h.Values("DKIM-Signature")
	out := make([]Verification, len(verifs))
	for i, v := range verifs {
		out[i] = Verification{Domain: v.Domain, Err: v.Err}
		if i < len(fields) {
			out[i].Selector, _ = tag(fields[i], "s")
		}
	}
	return out, nil
}

// tag is the value of tag name in a tag list (a=b; c=d), its folding
// whitespace removed, and whether the list has it.
func tag(list, name string) (string, bool) {
	for kv := range strings.SplitSeq(list, ";") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.TrimSpace(k) == name {
			return strings.Join(strings.Fields(v), ""), true
		}
	}
	return "", false
}

// ParseRecord reads a key record given by hand: its value (v=DKIM1; k=rsa;
// p=…) or a zone file line as keygen prints it (NAME. IN TXT "…" "…"), whose
// quoted strings are joined. name is the line's owner name, "" for a value
// alone.
func ParseRecord(s string) (name, record string, err error) {
	s = strings.TrimSpace(s)
	if before, after, ok := strings.Cut(s, `"`); ok && strings.Contains(" "+strings.ToUpper(before)+" ", " TXT ") {
		// A line without an owner name (IN TXT "…") names no record.
		if first := strings.ToUpper(strings.Fields(before)[0]); first != "IN" && first != "TXT" {
			name = strings.TrimSuffix(strings.Fields(before)[0], ".")
		}
		var b strings.Builder
		for i, part := range strings.Split(after, `"`) {
			if i%2 == 0 { // inside quotes: the split starts after the first one
				b.WriteString(part)
			}
		}
		s = b.String()
	}
	s = strings.Trim(s, `"`)
	if _, ok := tag(s, "p"); !ok {
		return "", "", fmt.Errorf("%q is not a DKIM key record: give its value (v=DKIM1; k=rsa; p=…) or the zone file line postino dkim keygen printed", short(s))
	}
	return name, s, nil
}

// short cuts s for an error message.
func short(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// Given answers the lookups of a key record given by hand instead of DNS:
// a record with a name (a zone file line) answers for that name only, one
// without a name for any.
func Given(name, record string) LookupTXT {
	return func(_ context.Context, q string) ([]string, error) {
		q = strings.TrimSuffix(q, ".")
		if name != "" && !strings.EqualFold(q, name) {
			return nil, &net.DNSError{Err: "the record given is for " + name, Name: q, IsNotFound: true}
		}
		return []string{record}, nil
	}
}
