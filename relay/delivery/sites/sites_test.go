package sites

import (
	"strings"
	"testing"
	"time"
)

func TestOf(t *testing.T) {
	r, err := Load([]byte(`
default:
  messages_per_minute: 30
providers:
  - name: partner
    mx: [mx.partner.example]
    sessions: 2
  - name: yahoo
    mx: [yahoodns.net]
    sessions: 1
`), 10)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		hosts    []string
		key      string
		sessions int
		rate     float64
	}{
		{hosts: []string{"aspmx.l.google.com", "alt1.aspmx.l.google.com"}, key: "google", sessions: 10, rate: 600},
		{hosts: []string{"ALT2.ASPMX.L.GOOGLE.COM."}, key: "google", sessions: 10, rate: 600},
		{hosts: []string{"example-com.mail.protection.outlook.com"}, key: "microsoft", sessions: 8, rate: 300},
		{hosts: []string{"mta5.am0.yahoodns.net"}, key: "yahoo", sessions: 1, rate: 30}, // the operator's rule, whole
		{hosts: []string{"mx01.mail.icloud.com"}, key: "apple", sessions: 5, rate: 120},
		{hosts: []string{"mx00.emig.gmx.net"}, key: "gmx-webde", sessions: 5, rate: 100},
		{hosts: []string{"mx.pec.aruba.it"}, key: "pec", sessions: 2, rate: 30}, // the longer suffix wins over aruba.it
		{hosts: []string{"mx.aruba.it"}, key: "aruba", sessions: 3, rate: 60},
		{hosts: []string{"mx.partner.example"}, key: "partner", sessions: 2, rate: 30},
		{hosts: []string{"notgoogle.com"}, key: "notgoogle.com", sessions: 10, rate: 30},
		// No provider: the set of hosts, whatever their order.
		{hosts: []string{"mx2.example.net", "MX1.example.net."}, key: "mx1.example.net mx2.example.net", sessions: 10, rate: 30},
		{hosts: []string{"mx1.example.net", "mx2.example.net", "mx1.example.net"}, key: "mx1.example.net mx2.example.net", sessions: 10, rate: 30},
		// The first host a provider has decides.
		{hosts: []string{"backup.example.org", "aspmx.l.google.com"}, key: "google", sessions: 10, rate: 600},
	}
	for _, tt := range tests {
		s := r.Of(tt.hosts)
		if s.Key != tt.key || s.Limits.Sessions != tt.sessions || s.Limits.MessagesPerMinute != tt.rate {
			t.Errorf("%v: site %q sessions %d rate %v, want %q %d %v", tt.hosts, s.Key, s.Limits.Sessions, s.Limits.MessagesPerMinute, tt.key, tt.sessions, tt.rate)
		}
		if s.Limits.MaxQueued != 200 || s.Limits.ConnectionsPerMinute == 0 {
			t.Errorf("%v: the default limits were not filled in: %+v", tt.hosts, s.Limits)
		}
	}
}

// TestNoLimit: a limit written 0 lifts the default's, where one left
// unset takes it.
func TestNoLimit(t *testing.T) {
	r, err := Load([]byte(`
default:
  connections_per_minute: 0
providers:
  - name: partner
    mx: [mx.partner.example]
    max_queued: 0
    messages_per_session: 0
`), 10)
	if err != nil {
		t.Fatal(err)
	}
	other := r.Of([]string{"mx.example.net"}).Limits
	if other.ConnectionsPerMinute > 0 || other.MaxQueued != 200 || other.MessagesPerSession != 100 {
		t.Errorf("default: %+v, want no connection rate, the shipped max_queued and messages_per_session", other)
	}
	partner := r.Of([]string{"mx.partner.example"}).Limits
	if partner.MaxQueued > 0 || partner.MessagesPerSession > 0 || partner.ConnectionsPerMinute > 0 || partner.Sessions != 10 {
		t.Errorf("partner: %+v, want no bound on queued, per session and connections, and mx_connections sessions", partner)
	}
}

func TestLoadRefuses(t *testing.T) {
	for _, tt := range []struct{ file, want string }{
		{"adapt:\n  decrease: 1.5\n", "adapt.decrease"},
		{"down:\n  probe: 1h\n", "probe_max"},
		{"providers:\n  - name: x\n", "needs a name and MX"},
		{"providers:\n  - name: x\n    mx: [google.com]\n", "provider google's too"},
		{"responses:\n  - match: x\n    action: pause\n", `action "pause"`},
		{"responses:\n  - match: x\n    action: suspend\n", "suspend needs a positive for"},
		{"default:\n  sessions: -1\n", "negative"},
		{"providers:\n  - name: x\n    mx: [x.example]\n    messages_per_minute: -0.5\n", "negative"},
		{"default:\n  sessions: 0\n", "at least one session"},
		{"defaults:\n  sessions: 1\n", "field defaults not found"},
	} {
		if _, err := Load([]byte(tt.file), 10); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want %q", tt.file, err, tt.want)
		}
	}
}

func TestRespond(t *testing.T) {
	r, err := Load(nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	yahoo := r.Of([]string{"mta6.am0.yahoodns.net"})
	ms := r.Of([]string{"x.mail.protection.outlook.com"})
	other := r.Of([]string{"mx.example.net"})
	for _, tt := range []struct {
		site   Site
		reply  string
		action Action
		for_   time.Duration
	}{
		{yahoo, "421 4.7.0 [TSS04] Messages from 192.0.2.1 temporarily deferred due to unexpected volume or user complaints", Suspend, 30 * time.Minute},
		{yahoo, "421 4.7.0 [tss04] lower case", Suspend, 30 * time.Minute},
		{ms, "550 5.7.606 Access denied, banned sending IP [192.0.2.1]. (S3150)", Block, time.Hour},
		{ms, "451 4.7.500 Server busy. Please try again later", Throttle, 0},
		{other, "421 4.7.28 Our system has detected an unusual rate", Throttle, 0}, // every site's rule
		{other, "550 5.1.1 no such user", "", 0},
		{other, "421 4.7.0 [TSS04] a Yahoo code from elsewhere", "", 0},
	} {
		got, ok := tt.site.Respond(tt.reply)
		if got.Action != tt.action || ok != (tt.action != "") || got.For != tt.for_ {
			t.Errorf("%s %q: %+v %v, want %s for %s", tt.site.Key, tt.reply, got, ok, tt.action, tt.for_)
		}
	}
}

func TestAdapt(t *testing.T) {
	a := Adapt{Decrease: 0.5, Increase: 0.1, Floor: 0.2, Cooldown: time.Second}
	t0 := time.Unix(0, 0)
	var s Share
	for _, step := range []struct {
		do       string
		at       time.Duration
		shrank   bool
		share    float64
		sessions int // of a limit of 10
	}{
		{do: "start", share: 1, sessions: 10},
		{do: "throttle", at: 0, shrank: true, share: 0.5, sessions: 5},
		{do: "throttle", at: 500 * time.Millisecond, share: 0.5, sessions: 5}, // the same burst
		{do: "throttle", at: 2 * time.Second, shrank: true, share: 0.25, sessions: 2},
		{do: "throttle", at: 4 * time.Second, shrank: true, share: 0.2, sessions: 2}, // the floor
		{do: "success", share: 0.3, sessions: 3},
		{do: "success", share: 0.4, sessions: 4},
		{do: "successes", share: 1, sessions: 10}, // never above 1
	} {
		switch step.do {
		case "throttle":
			if got := a.Throttle(&s, t0.Add(step.at)); got != step.shrank {
				t.Errorf("%s at %s: shrank %v, want %v", step.do, step.at, got, step.shrank)
			}
		case "success":
			a.Success(&s)
		case "successes":
			for range 20 {
				a.Success(&s)
			}
		}
		if d := s.Of() - step.share; d > 1e-9 || d < -1e-9 || s.Sessions(10) != step.sessions {
			t.Errorf("after %s at %s: share %v sessions %d, want %v %d", step.do, step.at, s.Of(), s.Sessions(10), step.share, step.sessions)
		}
	}
	if s.Sessions(0) != 0 || s.Rate(0) != 0 {
		t.Error("no limit must stay no limit")
	}
	var low Share
	a.Throttle(&low, t0)
	a.Throttle(&low, t0.Add(time.Hour))
	a.Throttle(&low, t0.Add(2*time.Hour))
	if low.Sessions(2) != 1 {
		t.Errorf("sessions %d: a site keeps one session at least", low.Sessions(2))
	}
}
