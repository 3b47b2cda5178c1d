package relay_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/admin"
)

func TestAdminToken(t *testing.T) {
	cfg, _ := testConfig(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600)
	cfg.Admin.TokenFile = tokenFile
	rl := start(t, cfg)
	base := "http://" + rl.r.AdminAddr().String()
	for _, tt := range []struct {
		method, path, token, header string
		want                        int
	}{
		{"GET", "/v1/messages", "", "", http.StatusUnauthorized},
		{"GET", "/v1/messages", "wrong", "", http.StatusUnauthorized},
		{"GET", "/v1/messages", "s3cret", "", http.StatusOK},
		{"GET", "/v1/stats", "", "", http.StatusUnauthorized},
		{"GET", "/metrics", "", "", http.StatusUnauthorized},
		{"GET", "/metrics", "s3cret", "", http.StatusOK},
		{"POST", "/v1/batches/b1/suspend", "", "", http.StatusUnauthorized},
		{"POST", "/v1/batches/b1/suspend", "s3cret", "", http.StatusOK},
		// A page on another site, in the operator's browser, holding the
		// token or not: refused.
		{"POST", "/v1/batches/b1/activate", "s3cret", "cross-site", http.StatusForbidden},
		{"GET", "/healthz", "", "", http.StatusOK},
		{"GET", "/readyz", "", "", http.StatusOK},
	} {
		req, _ := http.NewRequest(tt.method, base+tt.path, nil)
		if tt.token != "" {
			req.Header.Set("Authorization", "Bearer "+tt.token)
		}
		if tt.header != "" {
			req.Header.Set("Sec-Fetch-Site", tt.header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s %s token %q %s: %d, want %d", tt.method, tt.path, tt.token, tt.header, resp.StatusCode, tt.want)
		}
	}
	_, err := rl.client.List(context.Background(), admin.ListFilter{Limit: 1})
	var ae *admin.APIError
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusUnauthorized || !strings.Contains(ae.Message, "POSTINO_ADMIN_TOKEN_FILE") {
		t.Errorf("without the token: %v", err)
	}
	rl.client.Token = "s3cret"
	if _, err := rl.client.List(context.Background(), admin.ListFilter{Limit: 1}); err != nil {
		t.Errorf("with the token: %v", err)
	}
}

func TestAdminTokenRequiredOffLoopback(t *testing.T) {
	cfg := relay.DefaultConfig()
	cfg.Admin.Listen = "0.0.0.0:8525"
	if err := cfg.Check(); err == nil || !strings.Contains(err.Error(), "admin.token_file") {
		t.Errorf("an exposed admin API without a token: %v", err)
	}
	cfg.Admin.TokenEnv = "POSTINO_TEST_TOKEN"
	if err := cfg.Check(); err != nil {
		t.Errorf("with a token: %v", err)
	}
	if _, err := cfg.Admin.Token(func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "POSTINO_TEST_TOKEN") {
		t.Errorf("an empty token variable: %v", err)
	}
}

// TestStatsAndSearch: the dashboard's overview and search.
func TestStatsAndSearch(t *testing.T) {
	cfg, up := testConfig(t)
	pickyUpstream(up)
	rl := start(t, cfg)
	ctx := context.Background()
	var sent []string
	for range 3 {
		sent = append(sent, sendTo(t, rl.r.SMTPAddr().String(), []string{"Anna@Example.net"}, "", "x\r\n"))
	}
	failed := sendTo(t, rl.r.SMTPAddr().String(), []string{"nobody@example.net"}, "", "x\r\n")
	for _, id := range sent {
		waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
	}
	fm := waitStatus(t, rl.client, failed, "FAILED-ACKNOWLEDGED")

	st, err := rl.client.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Counts["SENT-ACKNOWLEDGED"] != 3 || st.Counts["FAILED-ACKNOWLEDGED"] != 1 || st.Counts["READY"] != 0 {
		t.Errorf("counts %v", st.Counts)
	}
	if total := lastHour(t, rl.client); total["SENT"] != 3 || total["FAILED"] != 1 || total["ACCEPTED"] != 4 {
		t.Errorf("the last hour %v", total)
	}
	recent, err := rl.client.Recent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f := recent["failed"]; len(f) != 1 || f[0].ID != failed || len(recent["bounced"]) != 0 {
		t.Errorf("recent %+v", recent)
	}

	for _, tt := range []struct {
		q    string
		want int
	}{{sent[0], 1}, {"<" + fm.MessageID + ">", 1}, {fm.MessageID, 1}, {"anna@example.NET", 3}, {"nobody@nowhere.example", 0}} {
		res, err := rl.client.Search(ctx, tt.q)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Messages) != tt.want {
			t.Errorf("search %q: %d messages, want %d", tt.q, len(res.Messages), tt.want)
		}
	}
	if _, err := rl.client.Search(ctx, " "); err == nil || !strings.Contains(err.Error(), "q is empty") {
		t.Errorf("empty search: %v", err)
	}
}
