package delivery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/genropy/postino/relay/delivery/sites"
)

const (
	// suspendRead is how often a relay reads, for a site it has mail for,
	// whether an operator suspended it on another relay of the store.
	suspendRead = 15 * time.Second
	// keptReplies is how many of a site's last replies it keeps to show.
	keptReplies = 5
)

// ErrNoSuspensions: the engine has no store to keep suspensions in.
var ErrNoSuspensions = errors.New("site suspensions need the outbox's lease rows, which this engine was not given")

// An operator's suspension of a site is the lease row
// "suspend:<site key>" (leaseName), held by "operator <name>" until it
// ends: it holds on every relay of the store, survives a restart and ends
// by itself. A relay reads it when the site first appears and then every
// suspendRead while it has mail for the site; a relay that is told
// (Suspend, Resume) knows at once.

// Suspend suspends the site of key (a provider's name is its site's key)
// until the given time, for every relay sharing the store: its mail is
// handed back without a try. by names the operator ("operator ann").
func (e *Engine) Suspend(ctx context.Context, key, by string, until time.Time) error {
	if !until.After(time.Now()) {
		return fmt.Errorf("a suspension of site %s must end in the future, not at %s", key, until.UTC().Format(time.RFC3339))
	}
	return e.setHeld(ctx, key, cmp.Or(by, "operator"), until)
}

// Resume ends an operator's suspension of the site of key, and on this
// relay a response rule's.
func (e *Engine) Resume(ctx context.Context, key string) error {
	if err := e.setHeld(ctx, key, "", time.Time{}); err != nil {
		return err
	}
	e.mu.Lock()
	s := e.sites[key]
	e.mu.Unlock()
	if s != nil {
		s.mu.Lock()
		s.suspended = time.Time{}
		s.mu.Unlock()
	}
	return nil
}

// setHeld writes the suspension row of key: owner until the given time,
// or, with no owner, ended. A suspension held by another operator is
// ended first, its row claimed as its holder.
func (e *Engine) setHeld(ctx context.Context, key, owner string, until time.Time) error {
	if e.cfg.Leases == nil {
		return ErrNoSuspensions
	}
	if key == "" {
		return errors.New("name a site: its key (MX hosts, as destinations list shows) or a provider's name")
	}
	name := leaseName("suspend", key)
	cur, err := e.cfg.Leases.ReadCursor(ctx, name)
	if err != nil {
		return fmt.Errorf("site %s: read its suspension: %w", key, err)
	}
	now := time.Now()
	if cur.Owner != "" && cur.Owner != owner && now.Before(cur.LeaseUntil) {
		if _, err := e.cfg.Leases.ClaimCursor(ctx, name, cur.Owner, now); err != nil {
			return fmt.Errorf("site %s: end the suspension by %s: %w", key, cur.Owner, err)
		}
	}
	if owner != "" {
		if _, err := e.cfg.Leases.ClaimCursor(ctx, name, owner, until); err != nil {
			return fmt.Errorf("site %s: store its suspension: %w", key, err)
		}
	}
	e.mu.Lock()
	s := e.sites[key]
	e.mu.Unlock()
	if s != nil {
		s.mu.Lock()
		s.held, s.heldBy, s.read = until, owner, now
		s.mu.Unlock()
	}
	if owner == "" {
		e.log.Warn("delivery: site resumed by an operator", "site", key)
	} else {
		e.log.Warn("delivery: site suspended by an operator: its mail waits, handed back", "site", key, "by", owner, "until", until.UTC())
	}
	return nil
}

// readHeld reads, when it is time, whether an operator suspended the
// site: at once (wait) when the site is new, off the caller's way
// otherwise.
func (s *site) readHeld(now time.Time, wait bool) {
	if s.e.cfg.Leases == nil {
		return
	}
	s.mu.Lock()
	due := !s.reading && now.Sub(s.read) >= suspendRead
	if due {
		s.reading = true
	}
	s.mu.Unlock()
	if !due {
		return
	}
	read := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.e.abort), s.e.cfg.Timeouts.Command)
		defer cancel()
		cur, err := s.e.cfg.Leases.ReadCursor(ctx, leaseName("suspend", s.rule.Key))
		s.mu.Lock()
		defer s.mu.Unlock()
		s.reading = false
		if err != nil {
			// Read again at the next job: the outbox's trouble is
			// reported by its own.
			return
		}
		s.read = time.Now()
		if time.Now().Before(cur.LeaseUntil) {
			s.held, s.heldBy = cur.LeaseUntil, cur.Owner
		} else {
			s.held, s.heldBy = time.Time{}, ""
		}
	}
	if wait {
		read()
		return
	}
	go read()
}

// SiteReply is one of a site's last replies, or a connection failure.
type SiteReply struct {
	At    time.Time `json:"at"`
	Reply string    `json:"reply"`
	// Times counts it in a row.
	Times int `json:"times"`
}

// heard keeps what the site said: a reply the same as the last counts
// again.
func (s *site) heard(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if n := len(s.replies); n > 0 && s.replies[n-1].Reply == what {
		s.replies[n-1].At = now
		s.replies[n-1].Times++
		return
	}
	if len(s.replies) == keptReplies {
		s.replies = slices.Delete(s.replies, 0, 1)
	}
	s.replies = append(s.replies, SiteReply{At: now, Reply: what, Times: 1})
}

// Site states.
const (
	SiteUp         = "up"
	SiteBackingOff = "backing off"
	SiteDown       = "down"
	SiteSuspended  = "suspended"
)

// SiteView is a site as this relay sees it, for operators.
type SiteView struct {
	Key string `json:"key"`
	// Provider is the rule's provider, empty for the default rule.
	Provider string `json:"provider,omitempty"`
	// Domains are the recipient domains known to be served by it now.
	Domains []string `json:"domains"`
	// Queued wait in memory for a session; InFlight are being sent (a
	// session carries one at a time); Sessions are running, busy or
	// idle.
	Queued   int `json:"queued"`
	InFlight int `json:"in_flight"`
	Sessions int `json:"sessions"`
	// State is up, backing off (AIMD cut its share), down or suspended;
	// Why says why when it is not up, and Until when that ends, if known.
	State string     `json:"state"`
	Why   string     `json:"why,omitempty"`
	Until *time.Time `json:"until,omitempty"`
	// Limits are the rule's; Now are those that apply now: the rule's
	// scaled by Share (AIMD) and, in a fleet, by this relay's part of
	// the site's slots (FleetSlots of Limits.Sessions).
	Limits     sites.Limits `json:"limits"`
	Now        sites.Limits `json:"now"`
	Share      float64      `json:"share"`
	FleetSlots *int         `json:"fleet_slots,omitempty"`
	// Rule says where the limits come from.
	Rule    string      `json:"rule"`
	Replies []SiteReply `json:"replies"`
}

// Sites are the sites this relay has seen, by key.
func (e *Engine) Sites() []SiteView {
	e.mu.Lock()
	all := make([]*site, 0, len(e.sites))
	for _, s := range e.sites {
		all = append(all, s)
	}
	domains := map[*site][]string{}
	now := time.Now()
	for d, k := range e.domains {
		if now.Before(k.until) {
			domains[k.site] = append(domains[k.site], d)
		}
	}
	var queues []*queue
	for _, q := range e.queues {
		if q.site != nil {
			queues = append(queues, q)
		}
	}
	e.mu.Unlock()
	out := make([]SiteView, 0, len(all))
	for _, s := range all {
		v := s.view(now)
		v.Domains = domains[s]
		slices.Sort(v.Domains)
		for _, q := range queues {
			if q.site == s {
				q.mu.Lock()
				v.Queued += q.queued
				v.Sessions += q.active
				v.InFlight += q.active - len(q.idle)
				q.mu.Unlock()
			}
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b SiteView) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// SiteByKey is one of Sites, by its key; ok is false for a site this
// relay has not seen.
func (e *Engine) SiteByKey(key string) (SiteView, bool) {
	for _, v := range e.Sites() {
		if v.Key == key {
			return v, true
		}
	}
	return SiteView{}, false
}

// view is the site's state and limits now.
func (s *site) view(now time.Time) SiteView {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.rule.Limits
	part := s.fleetPart()
	v := SiteView{Key: s.rule.Key, Provider: s.rule.Provider, Share: s.share.Of(), Replies: slices.Clone(s.replies),
		Limits: l, Rule: "default (providers.yaml's, or delivery.sites.file's)"}
	if s.rule.Provider != "" {
		v.Rule = "provider " + s.rule.Provider
	}
	v.Now = v.Limits
	v.Now.Sessions = s.share.Sessions(l.Sessions)
	v.Now.MessagesPerMinute = part * s.share.Rate(l.MessagesPerMinute)
	v.Now.MessagesPerHour = part * l.MessagesPerHour
	v.Now.ConnectionsPerMinute = part * l.ConnectionsPerMinute
	if s.e.fleet != nil {
		n := s.e.fleet.holds(s.rule.Key)
		v.FleetSlots = &n
	}
	v.State = SiteUp
	if s.share.Of() < 1 {
		v.State, v.Why = SiteBackingOff, fmt.Sprintf("throttling signals cut its share to %.2f (AIMD); each message accepted grows it back", s.share.Of())
	}
	if why := s.closedLocked(now); why != "" {
		// Until the suspension ends, or the next probe of a site down.
		v.State, v.Why = SiteDown, strings.TrimPrefix(why, "handed back: ")
		until := s.probeAt
		if now.Before(s.held) || now.Before(s.suspended) {
			v.State, until = SiteSuspended, s.held
			if s.suspended.After(until) {
				until = s.suspended
			}
		}
		v.Until = &until
	}
	return v
}
