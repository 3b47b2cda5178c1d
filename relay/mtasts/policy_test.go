package mtasts

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, text string
		mode       string
		mx         string
		age        time.Duration
		err        string
	}{
		{name: "enforce", text: "version: STSv1\r\nmode: enforce\r\nmx: mail.example.com\r\nmx: *.Example.NET.\r\nmax_age: 86400\r\n",
			mode: ModeEnforce, mx: "mail.example.com *.example.net", age: 24 * time.Hour},
		{name: "LF, unknown keys", text: "version: STSv1\nmode: testing\nmx: mx.example.com\nmax_age: 600\nextension: x\n",
			mode: ModeTesting, mx: "mx.example.com", age: 10 * time.Minute},
		{name: "none without mx", text: "version: STSv1\nmode: none\nmax_age: 60\n", mode: ModeNone, age: time.Minute},
		{name: "max_age capped at a year", text: "version: STSv1\nmode: none\nmax_age: 99999999\n", mode: ModeNone, age: 31557600 * time.Second},
		{name: "no version", text: "mode: enforce\nmx: a\nmax_age: 1\n", err: "version"},
		{name: "another version", text: "version: STSv2\nmode: enforce\nmx: a\nmax_age: 1\n", err: "version"},
		{name: "bad mode", text: "version: STSv1\nmode: strict\nmx: a\nmax_age: 1\n", err: `mode "strict"`},
		{name: "no mx", text: "version: STSv1\nmode: enforce\nmax_age: 1\n", err: "no mx"},
		{name: "bad max_age", text: "version: STSv1\nmode: enforce\nmx: a\nmax_age: -1\n", err: "max_age"},
		{name: "not key: value", text: "version: STSv1\ngarbage\n", err: "not key: value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse(tt.text)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("%v, want an error with %q", err, tt.err)
				}
				return
			}
			if err != nil || p.Mode != tt.mode || strings.Join(p.MX, " ") != tt.mx || p.MaxAge != tt.age {
				t.Errorf("%+v %v, want mode %s mx %s max_age %v", p, err, tt.mode, tt.mx, tt.age)
			}
		})
	}
}

func TestMatch(t *testing.T) {
	p := &Policy{MX: []string{"mail.example.com", "*.example.net"}}
	for host, want := range map[string]bool{
		"mail.example.com": true, "MAIL.example.com.": true, "mx.example.com": false,
		"mx1.example.net": true, "a.b.example.net": false, "example.net": false, ".example.net": false,
	} {
		if got := p.Match(host); got != want {
			t.Errorf("Match(%s) = %v, want %v", host, got, want)
		}
	}
}

func TestRecord(t *testing.T) {
	for txt, want := range map[string]string{
		"v=STSv1; id=20260301T000000;": "20260301T000000",
		"v=STSv1;id=abc":               "abc",
		"v=spf1 -all":                  "",
		"v=STSv1; id=a-b":              "error",
		"v=STSv1;":                     "error",
	} {
		id, ok, err := record(txt)
		got := id
		if err != nil {
			got = "error"
		} else if !ok {
			got = ""
		}
		if got != want {
			t.Errorf("record(%q) = %q, %v, %v; want %q", txt, id, ok, err, want)
		}
	}
}
