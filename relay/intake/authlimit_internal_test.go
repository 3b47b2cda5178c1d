package intake

import (
	"net/netip"
	"testing"
	"time"
)

func TestAuthLimiter(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newAuthLimiter(AuthLimits{Delay: time.Second, MaxDelay: 5 * time.Second, PerClient: 3, Window: time.Minute, Clients: 2})
	a := netip.MustParseAddr("192.0.2.1")
	for i, want := range []int{1, 2, 3} {
		if n := l.fail(a, t0.Add(time.Duration(i)*time.Second)); n != want {
			t.Fatalf("failure %d counted %d", want, n)
		}
	}
	if until, ok := l.blocked(a, t0.Add(30*time.Second)); !ok || !until.Equal(t0.Add(time.Minute)) {
		t.Errorf("blocked = %v %v, want until %v", until, ok, t0.Add(time.Minute))
	}
	if _, ok := l.blocked(a, t0.Add(time.Minute)); ok {
		t.Error("still blocked once the window has passed")
	}
	if n := l.fail(a, t0.Add(time.Minute)); n != 1 {
		t.Errorf("a failure after the window counted %d, want 1", n)
	}

	// An IPv6 client counts by its /64.
	v6a, v6b := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::ffff:2")
	l.fail(v6a, t0)
	if n := l.fail(v6b, t0); n != 2 {
		t.Errorf("two addresses of one /64 counted %d, want 2", n)
	}
	// The table holds two. A third address first takes the place of an
	// expired entry (the /64's, since t0)...
	if n := l.tracked(); n != 2 {
		t.Errorf("the table holds %d, want 2", n)
	}
	l.fail(netip.MustParseAddr("198.51.100.7"), t0.Add(90*time.Second))
	if n := l.tracked(); n != 2 {
		t.Errorf("the table holds %d after a third address, want 2", n)
	}
	// ... and then, all live, of the oldest (a's, since t0+1m).
	l.fail(netip.MustParseAddr("198.51.100.8"), t0.Add(95*time.Second))
	if n := l.tracked(); n != 2 {
		t.Errorf("the table holds %d after a fourth address, want 2", n)
	}
	if n := l.fail(a, t0.Add(96*time.Second)); n != 1 {
		t.Errorf("the oldest entry was kept: a failure counted %d", n)
	}

	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 5 * time.Second, 100: 5 * time.Second} {
		if got := l.delay(n); got != want {
			t.Errorf("delay(%d) = %v, want %v", n, got, want)
		}
	}
}

// A full table makes room from an entry not blocked before a blocked one,
// however old: an attacker cannot free its own address by failing from
// others.
func TestAuthLimiterKeepsBlocked(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newAuthLimiter(AuthLimits{PerClient: 2, Window: time.Hour, Clients: 2})
	guesser := netip.MustParseAddr("192.0.2.1")
	l.fail(guesser, t0)
	l.fail(guesser, t0)
	for i := range 20 {
		l.fail(netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), t0.Add(time.Duration(i+1)*time.Second))
	}
	if _, blocked := l.blocked(guesser, t0.Add(time.Minute)); !blocked {
		t.Error("the blocked address was pushed out of the table by failures from others")
	}
	if n := l.tracked(); n != 2 {
		t.Errorf("the table holds %d, want 2", n)
	}
}
