package unsubscribe

import (
	"encoding/base64"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	keyA = []byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	keyB = []byte("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")
	t0   = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
)

func mustKeys(t testing.TB, grace time.Duration, secrets ...[]byte) *Keys {
	t.Helper()
	k, err := NewKeys(grace, secrets...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustToken(t testing.TB, k *Keys, u Target, issued time.Time) string {
	t.Helper()
	tok, err := k.Token(u, issued)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestTokenRoundTrip(t *testing.T) {
	k := mustKeys(t, time.Hour, keyA)
	for _, u := range []Target{
		{Stream: "news", Recipient: "jane@example.com", MessageID: "<1@example.com>"},
		{Stream: "", Recipient: "", MessageID: ""},
		{Stream: "avvisi", Recipient: "josé@exämple.it", MessageID: strings.Repeat("m", 200)},
	} {
		tok := mustToken(t, k, u, t0)
		if len(tok) > MaxTokenLen {
			t.Errorf("token of %d characters", len(tok))
		}
		got, err := k.Verify(tok, t0.Add(1000*24*time.Hour))
		if err != nil || got != u {
			t.Errorf("Verify(Token(%+v)) = %+v, %v", u, got, err)
		}
	}
	if _, err := k.Token(Target{Recipient: strings.Repeat("r", MaxTokenLen)}, t0); err == nil {
		t.Error("Token made a token longer than MaxTokenLen")
	}
}

func TestRotation(t *testing.T) {
	const grace = 30 * 24 * time.Hour
	u := Target{Stream: "news", Recipient: "jane@example.com", MessageID: "<1@x>"}
	old := mustToken(t, mustKeys(t, grace, keyA), u, t0)
	rotated := mustKeys(t, grace, keyB, keyA)
	fresh := mustToken(t, rotated, u, t0)
	for _, c := range []struct {
		name  string
		keys  *Keys
		token string
		now   time.Time
		ok    bool
	}{
		{"old key within grace", rotated, old, t0.Add(grace - time.Second), true},
		{"old key at grace", rotated, old, t0.Add(grace), false},
		{"old key past grace", rotated, old, t0.Add(grace + time.Hour), false},
		{"current key long after", rotated, fresh, t0.Add(10 * grace), true},
		{"old key still current", mustKeys(t, grace, keyA, keyB), old, t0.Add(10 * grace), true},
		{"key dropped", mustKeys(t, grace, keyB), old, t0, false},
	} {
		got, err := c.keys.Verify(c.token, c.now)
		if c.ok && (err != nil || got != u) {
			t.Errorf("%s: %+v, %v; want the target", c.name, got, err)
		}
		if !c.ok && err != ErrInvalid {
			t.Errorf("%s: %+v, %v; want ErrInvalid", c.name, got, err)
		}
	}
}

// sealed signs raw payload bytes with k, as Token does, for the tokens
// Token cannot make.
func sealed(k key, payload []byte) string {
	return base64.RawURLEncoding.EncodeToString(append(payload, k.mac(payload)...))
}

// badTokens are the kinds of tokens that must not verify, each made by
// keys (keyB signing, keyA older) at t0 and checked at t0.Add(time.Hour)
// with a grace of a minute.
func badTokens(t testing.TB) map[string]string {
	ka, kb, kc := newKey(keyA), newKey(keyB), newKey([]byte(strings.Repeat("c", 40)))
	keys := mustKeys(t, time.Minute, keyB, keyA)
	good := mustToken(t, keys, Target{Stream: "news", Recipient: "jane@example.com", MessageID: "<1@x>"}, t0)
	head := func(k key, version byte) []byte {
		b := append([]byte{version}, k.id[:]...)
		return binary.AppendUvarint(b, uint64(t0.Unix()))
	}
	fields := []byte{1, 's', 1, 'r', 0}
	flip := []byte(good)
	flip[10] ^= 1
	return map[string]string{
		"not base64":   "!!!!" + good[4:],
		"padding":      good + "==",
		"newline":      good[:8] + "\n" + good[8:],
		"truncated":    good[:len(good)-4],
		"short":        "AQID",
		"too long":     strings.Repeat("A", MaxTokenLen+1),
		"unknown key":  sealed(kc, append(head(kc, 1), fields...)),
		"bad MAC":      string(flip),
		"too old":      mustToken(t, mustKeys(t, time.Minute, keyA), Target{Stream: "news", Recipient: "jane@example.com"}, t0),
		"version":      sealed(kb, append(head(kb, 2), fields...)),
		"trailing":     sealed(kb, append(append(head(kb, 1), fields...), 'x')),
		"field length": sealed(kb, append(head(kb, 1), 1, 's', 9, 'r', 0)),
		"MAC of other": sealed(ka, append(head(kb, 1), fields...)),
	}
}

func TestVerifyRefuses(t *testing.T) {
	keys := mustKeys(t, time.Minute, keyB, keyA)
	for name, tok := range badTokens(t) {
		if got, err := keys.Verify(tok, t0.Add(time.Hour)); err != ErrInvalid {
			t.Errorf("%s: Verify = %+v, %v; want ErrInvalid", name, got, err)
		}
	}
}

func FuzzVerify(f *testing.F) {
	keys := mustKeys(f, time.Hour, keyB, keyA)
	f.Add(mustToken(f, keys, Target{Stream: "news", Recipient: "jane@example.com", MessageID: "<1@x>"}, t0))
	f.Add(mustToken(f, mustKeys(f, time.Hour, keyA), Target{Stream: "s", Recipient: "r"}, t0))
	for _, tok := range badTokens(f) {
		f.Add(tok)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		u, issued, err := keys.open(tok, t0.Add(time.Minute))
		if err != nil {
			if err != ErrInvalid {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			return
		}
		// Only the keys make tokens that verify: whichever did, this
		// one's fields and time signed again give the same token.
		for _, k := range []*Keys{keys, mustKeys(t, time.Hour, keyA)} {
			if again, _ := k.Token(u, issued); again == tok {
				return
			}
		}
		t.Fatalf("%q verified as %+v issued %v, which the keys did not sign", tok, u, issued)
	})
}

func TestLoadKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "\n"+string(keyA)+"\n", 0o600)
	short := write("short", "c2hvcnQ=\n", 0o600)
	open := write("open", string(keyB), 0o644)
	t.Setenv("UNSUB_TEST_KEY", "  "+string(keyB)+" ")
	t.Setenv("UNSUB_TEST_SHORT", "short")
	for _, c := range []struct {
		sources []string
		err     string // "" for none
	}{
		{[]string{"file:" + good, "env:UNSUB_TEST_KEY"}, ""},
		{[]string{"env:UNSUB_TEST_KEY"}, ""},
		{nil, "head -c 32 /dev/urandom"},
		{[]string{"file:" + short}, "head -c 32 /dev/urandom"},
		{[]string{"env:UNSUB_TEST_SHORT"}, "head -c 32 /dev/urandom"},
		{[]string{"file:" + filepath.Join(dir, "none")}, "head -c 32 /dev/urandom"},
		{[]string{"env:UNSUB_TEST_UNSET"}, "is not set"},
		{[]string{"file:" + open}, "chmod 600"},
		{[]string{"file:" + good, "file:" + good}, "the same key"},
		{[]string{string(keyA)}, "file:/path or env:NAME"},
	} {
		k, err := LoadKeys(time.Hour, c.sources)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("LoadKeys(%q): %v", c.sources, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("LoadKeys(%q) = %v; want an error saying %q", c.sources, err, c.err)
		case c.err == "":
			// The keys are the material as written, trimmed.
			want := mustKeys(t, time.Hour, keyA)
			if c.sources[0] != "file:"+good {
				want = mustKeys(t, time.Hour, keyB)
			}
			tok := mustToken(t, k, Target{Recipient: "r"}, t0)
			if _, err := want.Verify(tok, t0); err != nil {
				t.Errorf("LoadKeys(%q) signs with another key", c.sources)
			}
		}
	}
}
