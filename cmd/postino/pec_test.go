package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/internal/testrig/corpus"
	"github.com/genropy/postino/spool"
)

func TestPECParse(t *testing.T) {
	dir := filepath.Join("..", "..", "relay", "pec", "testdata")
	bundle := filepath.Join(dir, "provider-ca.pem")
	out, errOut, code := cli(t, "pec", "parse", "--trust-bundle", bundle, filepath.Join(dir, "errore-consegna-no-dest.eml"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"Type: errore-consegna", "Signature: valid, signed by", "errore: no-dest", "consegna: due@pec.dest.test",
		"Keys: Message-ID 20240301.1234@postino.test; identificativo opec-test.fixture@pec.provider.test", "Fields read from:"} {
		if !strings.Contains(flat, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	var rec struct {
		File      string            `json:"file"`
		Type      string            `json:"type"`
		Fields    map[string]string `json:"fields"`
		Signature struct{ Status string }
		Daticert  struct {
			Destinatari []struct{ Address, Type string }
		}
	}
	cliJSON(t, &rec, "pec", "parse", "--json", filepath.Join(dir, "accettazione.eml"))
	if rec.Type != "accettazione" || rec.Signature.Status != "not checked" || len(rec.Daticert.Destinatari) != 3 ||
		rec.Fields["destinatari"] != "daticert" || !strings.HasSuffix(rec.File, "accettazione.eml") {
		t.Errorf("JSON %+v", rec)
	}
	if _, errOut, code := cli(t, "pec", "parse", "/nonexistent.eml"); code != 1 || !strings.Contains(errOut, "/nonexistent.eml") {
		t.Errorf("missing file: exit %d: %s", code, errOut)
	}
	if _, errOut, code := cli(t, "pec", "parse"); code != 2 || !strings.Contains(errOut, "FILE") {
		t.Errorf("no file: exit %d: %s", code, errOut)
	}
	if _, errOut, code := cli(t, "pec", "parse", "--trust-bundle", "/nonexistent.pem", filepath.Join(dir, "accettazione.eml")); code != 1 ||
		!strings.Contains(errOut, "/nonexistent.pem") {
		t.Errorf("missing bundle: exit %d: %s", code, errOut)
	}
}

// TestPECParseAt checks that --at says when the receipt was received: a
// certificate expired by then is reported, the receipt still valid.
func TestPECParseAt(t *testing.T) {
	dir := filepath.Join("..", "..", "relay", "pec", "testdata")
	bundle := filepath.Join(dir, "provider-ca.pem")
	file := filepath.Join(dir, "errore-consegna-no-dest.eml")
	tests := []struct {
		at       string
		code     int
		want     string
		wantNot  string
		inStderr bool
	}{
		{"2030-06-01", 0, "Signature: valid, signed by", "has since expired", false},
		{"2100-06-01T10:00:00+02:00", 0, "the certificate has since expired (2099-12-31T23:59:59Z): an old receipt, not a forged one", "", false},
		{"2100-06-01", 0, "Signature: valid, signed by", "invalid", false},
		{"yesterday", 2, "--at \"yesterday\"", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.at, func(t *testing.T) {
			out, errOut, code := cli(t, "pec", "parse", "--trust-bundle", bundle, "--at", tt.at, file)
			got := strings.Join(strings.Fields(out), " ")
			if tt.inStderr {
				got = errOut
			}
			if code != tt.code || !strings.Contains(got, strings.Join(strings.Fields(tt.want), " ")) || tt.wantNot != "" && strings.Contains(got, tt.wantNot) {
				t.Errorf("exit %d, want %d with %q and without %q:\n%s%s", code, tt.code, tt.want, tt.wantNot, out, errOut)
			}
		})
	}
}

func TestQueueReceipts(t *testing.T) {
	data := t.TempDir()
	r := startRelayIn(t, data)
	admin := r.AdminAddr().String()
	sendOne(t, r.SMTPAddr().String(), "X-Genro-Mail-ID: cli-pec\r\nX-Postino-Send-After: "+time.Now().Add(time.Hour).UTC().Format(time.RFC3339)+"\r\n")
	out, _, code := cli(t, "queue", "receipts", "cli-pec", "--admin", admin)
	if code != 0 || !strings.Contains(out, "cli-pec has no receipts") {
		t.Fatalf("queue receipts: %d %s", code, out)
	}
	// Keep a receipt with the message, as the PEC recorder does.
	sp, err := spool.Open(filepath.Join(data, "spool"))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join("..", "..", "relay", "pec", "testdata", "accettazione.eml"))
	err = sp.Walk(func(e spool.Entry) error {
		if e.ID == "cli-pec" {
			return sp.SaveReceipt(e.Path, "accettazione-0123456789ab.eml", raw)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out, _, code = cli(t, "queue", "receipts", "cli-pec", "--admin", admin)
	if code != 0 || !strings.HasPrefix(out, "RECEIPT") || !strings.Contains(out, "accettazione-0123456789ab.eml") {
		t.Errorf("queue receipts:\n%s", out)
	}
	dir := t.TempDir()
	out, _, code = cli(t, "queue", "receipts", "cli-pec", "--out", dir, "--admin", admin)
	got, err := os.ReadFile(filepath.Join(dir, "accettazione-0123456789ab.eml"))
	if code != 0 || err != nil || !bytes.Equal(got, raw) {
		t.Errorf("queue receipts --out: %d %s: %v", code, out, err)
	}
	var list struct {
		Receipts []struct {
			Name string `json:"name"`
			Size int    `json:"size"`
		} `json:"receipts"`
	}
	cliJSON(t, &list, "queue", "receipts", "cli-pec", "--json", "--admin", admin)
	if len(list.Receipts) != 1 || list.Receipts[0].Size != len(raw) {
		t.Errorf("queue receipts --json: %+v", list)
	}
	if _, errOut, code := cli(t, "queue", "receipts", "nobody", "--admin", admin); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("receipts of an unknown id: %d %s", code, errOut)
	}
}

// TestPECParseRealReceipt reads a real provider's receipt, signed by a CA
// that the test bundle does not hold.
func TestPECParseRealReceipt(t *testing.T) {
	out, errOut, code := cli(t, "pec", "parse", "--trust-bundle", filepath.Join("..", "..", "relay", "pec", "testdata", "provider-ca.pem"),
		filepath.Join(corpus.Dir(t, "pec-real"), "aruba-accettazione.eml"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"Type: accettazione", "gestore-emittente: ARUBA PEC S.p.A.", "data: 2018-11-13 16:39:26 +0100", "Signature: invalid"} {
		if !strings.Contains(flat, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestPECParseWrapped checks that pec parse reads a forwarded receipt's own
// signature and says what it came inside.
func TestPECParseWrapped(t *testing.T) {
	dir := filepath.Join("..", "..", "relay", "pec", "testdata")
	raw, err := os.ReadFile(filepath.Join(dir, "errore-consegna-no-dest.eml"))
	if err != nil {
		t.Fatal(err)
	}
	fwd := filepath.Join(t.TempDir(), "inoltro.eml")
	msg := "From: Segreteria <segreteria@ufficio.test>\nSubject: I: ricevuta\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n" +
		"--b\nContent-Type: text/plain\n\nVedi sotto.\n--b\nContent-Type: message/rfc822\n\n" + string(raw) + "\n--b--\n"
	if err := os.WriteFile(fwd, []byte(msg), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := cli(t, "pec", "parse", "--trust-bundle", filepath.Join(dir, "provider-ca.pem"), fwd)
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"Type: errore-consegna", "Signature: valid, signed by", "Wrapped: forwarded inside a message from segreteria@ufficio.test"} {
		if code != 0 || !strings.Contains(flat, want) {
			t.Errorf("exit %d, output lacks %q:\n%s%s", code, want, out, errOut)
		}
	}
}
