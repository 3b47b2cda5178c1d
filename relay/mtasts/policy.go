// Package mtasts is MTA-STS for MX delivery (RFC 8461): a recipient
// domain's policy, read from its _mta-sts TXT record and fetched over
// HTTPS from its policy host, parsed, and cached in the store that the
// relays share, so that one fetch per max_age serves them all.
package mtasts

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Modes of a policy (RFC 8461 section 5).
const (
	// ModeEnforce: an MX host the policy does not list, or whose
	// certificate does not verify, is not sent to.
	ModeEnforce = "enforce"
	// ModeTesting: mail goes out as without a policy, and what would
	// have failed is reported (TLS-RPT).
	ModeTesting = "testing"
	// ModeNone: the domain withdrew its policy.
	ModeNone = "none"
)

// maxAge is the longest max_age a policy may give: a year (section 3.2).
const maxAge = 31557600 * time.Second

// Policy is a domain's MTA-STS policy.
type Policy struct {
	// Domain is the policy domain, lower case.
	Domain string `json:"domain"`
	// ID is the id of the TXT record under which it was fetched.
	ID   string `json:"id"`
	Mode string `json:"mode"`
	// MX are the patterns of the MX hosts it allows, lower case:
	// "mx.example.com", or "*.example.com" for one label more.
	MX     []string      `json:"mx"`
	MaxAge time.Duration `json:"max_age"`
	// Text is the policy as served, which TLS reports quote.
	Text string `json:"text"`
	// Fetched is when it was; it holds until Fetched plus MaxAge.
	Fetched time.Time `json:"fetched"`
}

// Parse reads a policy's text (section 3.2): "key: value" lines ending
// in CRLF or LF, version STSv1, mode, max_age in seconds, and mx once per
// pattern but with mode none; other keys are ignored, as the RFC asks.
func Parse(text string) (*Policy, error) {
	p := &Policy{Text: text}
	var version, age string
	for _, line := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("line %q is not key: value", line)
		}
		value = strings.TrimSpace(value)
		switch strings.TrimSpace(key) {
		case "version":
			version = value
		case "mode":
			p.Mode = value
		case "max_age":
			age = value
		case "mx":
			p.MX = append(p.MX, strings.TrimSuffix(strings.ToLower(value), "."))
		}
	}
	if version != "STSv1" {
		return nil, fmt.Errorf("version %q: want STSv1", version)
	}
	switch p.Mode {
	case ModeEnforce, ModeTesting, ModeNone:
	default:
		return nil, fmt.Errorf("mode %q: want enforce, testing or none", p.Mode)
	}
	secs, err := strconv.ParseUint(age, 10, 32)
	if err != nil || len(age) > 10 {
		return nil, fmt.Errorf("max_age %q: want a number of seconds", age)
	}
	p.MaxAge = min(time.Duration(secs)*time.Second, maxAge)
	if len(p.MX) == 0 && p.Mode != ModeNone {
		return nil, errors.New("no mx: a policy in mode " + p.Mode + " must list its MX hosts")
	}
	return p, nil
}

// Match reports whether the policy lists host (section 4.1): a pattern
// names it whole, or "*." and its parent: a wildcard stands for one
// label, the leftmost.
func (p *Policy) Match(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, mx := range p.MX {
		if mx == host {
			return true
		}
		if parent, ok := strings.CutPrefix(mx, "*."); ok {
			if label, rest, found := strings.Cut(host, "."); found && label != "" && rest == parent {
				return true
			}
		}
	}
	return false
}

// Expires is when the policy no longer holds.
func (p *Policy) Expires() time.Time { return p.Fetched.Add(p.MaxAge) }

// String names the policy in a reason: "MTA-STS policy enforce of
// example.com (id 2026a)".
func (p *Policy) String() string {
	return fmt.Sprintf("MTA-STS policy %s of %s (id %s)", p.Mode, p.Domain, p.ID)
}

// Lines are the policy's lines, as a TLS report's policy-string gives
// them.
func (p *Policy) Lines() []string {
	var out []string
	for _, l := range strings.Split(strings.ReplaceAll(p.Text, "\r\n", "\n"), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// record reads an _mta-sts TXT record (section 3.1): "v=STSv1; id=…",
// its id 1 to 32 letters and digits. ok is false for a record of another
// kind, which is ignored.
func record(txt string) (id string, ok bool, err error) {
	fields := strings.Split(txt, ";")
	if strings.TrimSpace(fields[0]) != "v=STSv1" {
		return "", false, nil
	}
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		if k == "id" {
			id = v
		}
	}
	if id == "" || len(id) > 32 || strings.IndexFunc(id, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	}) >= 0 {
		return "", true, fmt.Errorf("TXT record %q: its id must be 1 to 32 letters and digits", txt)
	}
	return id, true, nil
}
