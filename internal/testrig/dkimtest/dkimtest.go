// Package dkimtest verifies DKIM signatures in tests twice: with
// go-msgauth, and with an independent implementation, dkimpy (Debian's
// python3-dkim), both given the keys by the test instead of DNS.
package dkimtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	msgdkim "github.com/emersion/go-msgauth/dkim"
)

// Records maps a record name (selector._domainkey.domain) to its TXT value.
type Records map[string]string

// Lookup answers go-msgauth's TXT questions from the records.
func (r Records) Lookup(name string) ([]string, error) {
	v, ok := r[strings.TrimSuffix(name, ".")]
	if !ok {
		return nil, fmt.Errorf("no TXT record at %s", name)
	}
	return []string{v}, nil
}

// GoVerify returns go-msgauth's verdict on every signature of msg.
func GoVerify(msg []byte, r Records) ([]*msgdkim.Verification, error) {
	return msgdkim.VerifyWithOptions(bytes.NewReader(msg), &msgdkim.VerifyOptions{LookupTXT: r.Lookup})
}

// python is Debian's own interpreter, the one python3-dkim installs into;
// another python3 earlier on PATH would not have it.
const python = "/usr/bin/python3"

// PyVerify runs dkimpy on msg: one line per signature, "pass ..." or
// "fail ...", and an error unless all pass. Without python3-dkim the test
// is skipped, or fails under CI=true.
func PyVerify(t testing.TB, msg []byte, r Records) (string, error) {
	t.Helper()
	if err := exec.Command(python, "-c", "import dkim").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("python3-dkim is missing (%v): make test installs it (apt-get install -y python3-dkim)", err)
		}
		t.Skipf("python3-dkim is missing (%v): apt-get install -y python3-dkim", err)
	}
	dir := t.TempDir()
	recs, _ := json.Marshal(r)
	if err := os.WriteFile(filepath.Join(dir, "records.json"), recs, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "message.eml"), msg, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(python, script(), filepath.Join(dir, "records.json"), filepath.Join(dir, "message.eml")).CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run dkimverify.py: %v: %s", err, out)
	}
	return string(out), err
}

// Verify checks that msg carries signatures and that both verifiers pass
// every one; it returns the signing domain of each, "d=...".
func Verify(t testing.TB, msg []byte, r Records) []string {
	t.Helper()
	verifs, err := GoVerify(msg, r)
	if err != nil {
		t.Fatalf("go-msgauth: %v", err)
	}
	if len(verifs) == 0 {
		t.Fatalf("no DKIM-Signature in:\n%s", head(msg))
	}
	var sigs []string
	for _, v := range verifs {
		if v.Err != nil {
			t.Errorf("go-msgauth: d=%s: %v", v.Domain, v.Err)
		}
		sigs = append(sigs, "d="+v.Domain)
	}
	out, err := PyVerify(t, msg, r)
	if err != nil {
		t.Errorf("dkimpy: %v\n%s", err, out)
	}
	t.Logf("dkimpy: %s", strings.TrimSpace(out))
	return sigs
}

// Fails checks that at least one signature of msg is present and none
// verifies, with either implementation.
func Fails(t testing.TB, msg []byte, r Records) {
	t.Helper()
	verifs, err := GoVerify(msg, r)
	if err != nil {
		t.Fatalf("go-msgauth: %v", err)
	}
	if len(verifs) == 0 {
		t.Fatal("no DKIM-Signature")
	}
	for _, v := range verifs {
		if v.Err == nil {
			t.Errorf("go-msgauth verified d=%s on a message that should fail", v.Domain)
		}
	}
	if out, err := PyVerify(t, msg, r); err == nil || strings.Contains(out, "pass ") {
		t.Errorf("dkimpy verified a message that should fail:\n%s", out)
	}
}

func script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", "dkimverify.py")
}

func head(msg []byte) string {
	if i := bytes.Index(msg, []byte("\r\n\r\n")); i >= 0 {
		return string(msg[:i])
	}
	return string(msg)
}
