package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/testrig/logtest"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/spool"
)

// brokenStore is a real outbox whose reads of one message fail the way a
// store on a Unix socket fails: with the socket's path in the error.
type brokenStore struct {
	Store
	id, path string
}

func (s brokenStore) Get(ctx context.Context, id string) (*backends.Message, error) {
	if id == s.id {
		return nil, fmt.Errorf("dial unix %s: connect: no such file or directory", s.path)
	}
	return s.Store.Get(ctx, id)
}

// TestErrorsShowNoPath: whatever a client asks, an error of the API names
// no file of the machine; the log has the cause, under the reference the
// reply gives.
func TestErrorsShowNoPath(t *testing.T) {
	sp, bolt := outboxtest.Open(t)
	ok := &backends.Message{ID: "with-receipts", Status: backends.StatusAccepted}
	outboxtest.Add(t, sp, bolt, ok, []byte("Subject: x\r\n\r\nx\r\n"))
	if err := sp.SaveReceipt(ok.EmlPath, "accettazione.eml", []byte("Subject: r\r\n\r\nr\r\n")); err != nil {
		t.Fatal(err)
	}
	// A message whose receipts' folder is a file: reading it fails, with
	// its absolute path in the error.
	broken := &backends.Message{ID: "broken-receipts", Status: backends.StatusAccepted}
	outboxtest.Add(t, sp, bolt, broken, []byte("Subject: x\r\n\r\nx\r\n"))
	if err := os.WriteFile(filepath.Join(sp.Dir(), strings.TrimSuffix(broken.EmlPath, ".eml")+".receipts"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(t.TempDir(), "mysqld.sock")
	log, logs := logtest.Logger()
	srv := httptest.NewServer(NewHandler(brokenStore{Store: bolt, id: "outbox-down", path: socket},
		Options{Receipts: spool.NewBodies(sp, nil), Log: log}))
	defer srv.Close()

	tests := []struct {
		path   string
		code   int
		logged bool
	}{
		{"/v1/messages/with-receipts/receipts/accettazione.eml", http.StatusOK, false},
		{"/v1/messages/with-receipts/receipts/acc%00ettazione.eml", http.StatusBadRequest, false},
		{"/v1/messages/with-receipts/receipts/%00", http.StatusBadRequest, false},
		{"/v1/messages/with-receipts/receipts/%2E%2E", http.StatusBadRequest, false},
		{"/v1/messages/with-receipts/receipts/.hidden", http.StatusBadRequest, false},
		{"/v1/messages/with-receipts/receipts/..%2F..%2Foutbox.db", http.StatusBadRequest, false},
		{"/v1/messages/with-receipts/receipts/a%5Cb", http.StatusBadRequest, false},
		{"/v1/messages/with-receipts/receipts/" + strings.Repeat("a", 300), http.StatusBadRequest, false},
		{"/v1/messages/with-receipts/receipts/missing.eml", http.StatusNotFound, false},
		{"/v1/messages/no-such-id%00/receipts/a.eml", http.StatusNotFound, false},
		{"/v1/messages/broken-receipts/receipts", http.StatusServiceUnavailable, true},
		{"/v1/messages/broken-receipts/receipts/a.eml", http.StatusServiceUnavailable, true},
		{"/v1/messages/outbox-down", http.StatusServiceUnavailable, true},
		{"/v1/messages/outbox-down/receipts", http.StatusServiceUnavailable, true},
		{"/v1/messages?after=not-a-cursor", http.StatusBadRequest, false},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			before := logs.String()
			resp, err := http.Get(srv.URL + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.code {
				t.Fatalf("%d %s, want %d", resp.StatusCode, body, tt.code)
			}
			for _, p := range []string{sp.Dir(), socket, os.TempDir()} {
				if bytes.Contains(body, []byte(p)) {
					t.Errorf("the reply names %s: %s", p, body)
				}
			}
			if tt.code == http.StatusOK {
				return
			}
			var e Error
			if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
				t.Fatalf("not an error reply: %s", body)
			}
			logged := strings.TrimPrefix(logs.String(), before)
			if !tt.logged {
				return
			}
			_, ref, found := strings.Cut(e.Error, "ref=")
			if !found || !strings.Contains(logged, "ref="+ref) || !strings.Contains(logged, os.TempDir()) {
				t.Errorf("reply %q; the log does not have its cause under its reference:\n%s", e.Error, logged)
			}
		})
	}
}
