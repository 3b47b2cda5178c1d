package submissions

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emersion/go-message/mail"
)

// addressCases are address fields an app gives in the headers column,
// with the mailboxes a reader must find in the message built: each
// "name <address>".
var addressCases = []struct {
	Field, Value string
	Want         []string
}{
	{"From", "Shöp <shop@example.com>", []string{"Shöp <shop@example.com>"}},
	{"To", "Jürgen Müller <juergen@example.net>, Ann Lee <ann@example.org>",
		[]string{"Jürgen Müller <juergen@example.net>", "Ann Lee <ann@example.org>"}},
	{"Cc", `"Müller, Jürgen" <j@example.net>, plain@example.org`,
		[]string{"Müller, Jürgen <j@example.net>", " <plain@example.org>"}},
	{"Reply-To", `"Desk \"Support\" Ça va" <desk@example.com>`, []string{`Desk "Support" Ça va <desk@example.com>`}},
	{"Sender", "📬 Mailer ✉️ <mailer@example.com>", []string{"📬 Mailer ✉️ <mailer@example.com>"}},
	// Already encoded by the app: decoded, and encoded again alike.
	{"Bcc", "=?utf-8?q?Sh=C3=B6p?= <shop@example.com>", []string{"Shöp <shop@example.com>"}},
	// Longer than one encoded word may be (75 octets).
	{"resent-to", strings.Repeat("Größenwahn ", 8) + "<long@example.com>",
		[]string{strings.TrimSpace(strings.Repeat("Größenwahn ", 8)) + " <long@example.com>"}},
}

// TestAddressFields: an address field of the parts form is written as an
// address list, its display names encoded and its addresses as they are,
// so that go-message and Python's email package read back the same names
// and addresses.
func TestAddressFields(t *testing.T) {
	headers := map[string]string{}
	for _, tc := range addressCases {
		headers[tc.Field] = tc.Value
	}
	b, _ := json.Marshal(headers)
	r := row{from: "app@example.com", rcpts: `["user@example.net"]`, text: valid("Hello."), headers: valid(string(b))}
	msg, err := r.build()
	if err != nil {
		t.Fatal(err)
	}
	h, err := mail.CreateReader(bytes.NewReader(msg))
	if err != nil {
		t.Fatal(err)
	}
	python := pythonAddresses(t, msg)
	for _, tc := range addressCases {
		list, err := h.Header.AddressList(tc.Field)
		if err != nil {
			t.Errorf("%s %q: go-message cannot read it back: %v", tc.Field, h.Header.Get(tc.Field), err)
			continue
		}
		var got []string
		for _, a := range list {
			got = append(got, a.Name+" <"+a.Address+">")
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.Want) {
			t.Errorf("%s: go-message reads %q; want %q (the field: %q)", tc.Field, got, tc.Want, h.Header.Get(tc.Field))
		}
		if py := python[strings.ToLower(tc.Field)]; fmt.Sprint(py) != fmt.Sprint(tc.Want) {
			t.Errorf("%s: Python's email package reads %q; want %q (the field: %q)", tc.Field, py, tc.Want, h.Header.Get(tc.Field))
		}
		for _, line := range strings.Split(h.Header.Get(tc.Field), "\r\n") {
			if strings.ContainsFunc(line, func(r rune) bool { return r > 127 }) {
				t.Errorf("%s is not ASCII: %q", tc.Field, line)
			}
		}
	}
}

// TestAddressFieldRefused: an address field that is no address list is
// refused with a reason that names it and says how to write it.
func TestAddressFieldRefused(t *testing.T) {
	for _, v := range []string{"Müller, Jürgen <j@example.net>", "not an address", "Ann <ann@>"} {
		b, _ := json.Marshal(map[string]string{"To": v})
		r := row{from: "app@example.com", rcpts: `["user@example.net"]`, text: valid("Hello."), headers: valid(string(b))}
		_, err := r.build()
		if err == nil || !strings.Contains(err.Error(), "To") || !strings.Contains(err.Error(), "not an address list") {
			t.Errorf("To %q: %v; want a refusal naming To", v, err)
		}
	}
}

func valid(s string) sql.NullString { return sql.NullString{String: s, Valid: true} }

// pythonAddresses reads msg with Python's email package (its default
// policy, which parses address fields) and returns, for each field by its
// lower-case name, its mailboxes as "name <address>".
func pythonAddresses(t *testing.T, msg []byte) map[string][]string {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("python3 is needed to read the message as Python's email package does: %v", err)
		}
		t.Skipf("no python3: %v", err)
	}
	path := filepath.Join(t.TempDir(), "message.eml")
	if err := os.WriteFile(path, msg, 0o600); err != nil {
		t.Fatal(err)
	}
	const script = `
import email, email.policy, json, sys
msg = email.message_from_binary_file(open(sys.argv[1], "rb"), policy=email.policy.default)
out = {}
for name in set(k.lower() for k in msg.keys()):
    h = msg[name]
    if hasattr(h, "addresses"):
        out[name] = [a.display_name + " <" + a.addr_spec + ">" for a in h.addresses]
json.dump(out, sys.stdout)
`
	out, err := exec.Command(python, "-c", script, path).Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	var got map[string][]string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("python3 printed %q: %v", out, err)
	}
	return got
}
