package unsubscribe

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestHeaders(t *testing.T) {
	keys := mustKeys(t, time.Hour, keyA)
	long := Target{Stream: "news", Recipient: "jane@example.com", MessageID: "<" + strings.Repeat("m", 900) + "@x>"}
	for _, c := range []struct {
		name   string
		u      Target
		mailto string
		want   Target // what the links name
	}{
		{"both", Target{Stream: "news", Recipient: "jane@example.com", MessageID: "<1@x>"}, "unsub@example.com",
			Target{Stream: "news", Recipient: "jane@example.com", MessageID: "<1@x>"}},
		{"https only", Target{Stream: "news", Recipient: "jane@example.com"}, "", Target{Stream: "news", Recipient: "jane@example.com"}},
		{"message id too long", long, "unsub@example.com", Target{Stream: "news", Recipient: "jane@example.com"}},
	} {
		lu, post := keys.Headers(c.u, "https://unsub.example.com/", c.mailto, t0)
		if post != "List-Unsubscribe=One-Click" {
			t.Errorf("%s: List-Unsubscribe-Post %q", c.name, post)
		}
		uris := strings.Split(lu, ", ")
		want := 1
		if c.mailto != "" {
			want = 2
		}
		if len(uris) != want {
			t.Fatalf("%s: List-Unsubscribe %q has %d URIs, want %d", c.name, lu, len(uris), want)
		}
		for _, uri := range uris {
			if !strings.HasPrefix(uri, "<") || !strings.HasSuffix(uri, ">") || len("List-Unsubscribe: "+uri+",") > 998 {
				t.Errorf("%s: %q is not a <URI> that fits a header line", c.name, uri)
			}
		}
		link, err := url.Parse(strings.Trim(uris[0], "<>"))
		if err != nil || link.Scheme != "https" || link.Host != "unsub.example.com" || !strings.HasPrefix(link.Path, "/u/") {
			t.Fatalf("%s: link %q: %v", c.name, uris[0], err)
		}
		if got, err := keys.Verify(strings.TrimPrefix(link.Path, "/u/"), t0); err != nil || got != c.want {
			t.Errorf("%s: the link names %+v, %v; want %+v", c.name, got, err, c.want)
		}
		if c.mailto == "" {
			continue
		}
		m, err := url.Parse(strings.Trim(uris[1], "<>"))
		if err != nil || m.Scheme != "mailto" || m.Opaque != c.mailto {
			t.Fatalf("%s: mailto %q: %v", c.name, uris[1], err)
		}
		if got, err := keys.FromMail("Re: "+m.Query().Get("subject"), t0); err != nil || got != c.want {
			t.Errorf("%s: the mailto subject names %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
	if lu, post := keys.Headers(Target{Recipient: strings.Repeat("r", MaxTokenLen)}, "https://x", "", t0); lu != "" || post != "" {
		t.Errorf("Headers for a target no token can name = %q, %q; want none", lu, post)
	}
}

func TestFromMail(t *testing.T) {
	keys := mustKeys(t, time.Hour, keyA)
	u := Target{Stream: "news", Recipient: "jane@example.com", MessageID: "<1@x>"}
	tok := mustToken(t, keys, u, t0)
	bad := badTokens(t)["bad MAC"]
	for _, c := range []struct {
		subject string
		ok      bool
	}{
		{"unsubscribe " + tok, true},
		{"Re: UNSUBSCRIBE " + tok, true},
		{"Fwd: Re: Unsubscribe\t" + tok + " please", true},
		{"unsubscribe " + bad + " unsubscribe " + tok, true},
		{"unsubscribe " + tok[:len(tok)-1], false},
		{"unsubscribe" + tok, false},
		{"resubscribe " + tok, false},
		{tok, false},
		{"", false},
		{strings.Repeat("unsubscribe "+bad+" ", 10) + "unsubscribe " + tok, false}, // past the candidates tried
	} {
		got, err := keys.FromMail(c.subject, t0)
		if c.ok && (err != nil || got != u) {
			t.Errorf("FromMail(%.40q) = %+v, %v; want the target", c.subject, got, err)
		}
		if !c.ok && err != ErrInvalid {
			t.Errorf("FromMail(%.40q) = %+v, %v; want ErrInvalid", c.subject, got, err)
		}
	}
}
