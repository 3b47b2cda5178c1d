package dkim

import (
	"context"
	"strings"
	"testing"
)

func TestParseRecord(t *testing.T) {
	long := "v=DKIM1; k=rsa; p=" + strings.Repeat("A", 300)
	tests := []struct {
		in, name, record, err string
	}{
		{"v=DKIM1; k=ed25519; p=abc=", "", "v=DKIM1; k=ed25519; p=abc=", ""},
		{`  "v=DKIM1; k=rsa; p=abc"  `, "", "v=DKIM1; k=rsa; p=abc", ""},
		{ZoneLine("example.com", "s1", long) + "\n", "s1._domainkey.example.com", long, ""},
		{`s1._domainkey.example.com. 3600 IN TXT "v=DKIM1; p=ab" "cd" ; a comment`, "s1._domainkey.example.com", "v=DKIM1; p=abcd", ""},
		{`IN TXT "v=DKIM1; p=ab"`, "", "v=DKIM1; p=ab", ""},
		{"v=DKIM1; k=rsa; p=", "", "v=DKIM1; k=rsa; p=", ""}, // revoked, still a record
		{"hello", "", "", `"hello" is not a DKIM key record`},
		{`s1._domainkey.example.com. IN TXT "v=DKIM1; k=rsa"`, "", "", "is not a DKIM key record"},
	}
	for _, tt := range tests {
		name, record, err := ParseRecord(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseRecord(%q): %v, want an error with %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || name != tt.name || record != tt.record {
			t.Errorf("ParseRecord(%q) = %q, %q, %v; want %q, %q", tt.in, name, record, err, tt.name, tt.record)
		}
	}
}

func TestGiven(t *testing.T) {
	ctx := context.Background()
	unnamed := Given("", "v=DKIM1; p=x")
	if txts, err := unnamed(ctx, "s9._domainkey.example.org."); err != nil || len(txts) != 1 || txts[0] != "v=DKIM1; p=x" {
		t.Errorf("a record without a name: %v, %v", txts, err)
	}
	named := Given("s1._domainkey.example.com", "v=DKIM1; p=x")
	if txts, err := named(ctx, "S1._domainkey.example.com."); err != nil || len(txts) != 1 {
		t.Errorf("its own name: %v, %v", txts, err)
	}
	if _, err := named(ctx, "s2._domainkey.example.com"); err == nil || !strings.Contains(err.Error(), "the record given is for s1._domainkey.example.com") {
		t.Errorf("another name: %v", err)
	}
}
