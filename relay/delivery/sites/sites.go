// Package sites holds the shaping rules of MX delivery: what a site is (the
// MX hosts a recipient domain resolves to, or the provider they belong to),
// the limits a site's mail goes out within, how those adapt to what the
// site says (AIMD), and the rules on response text. The rules ship as data
// (providers.yaml); an operator's file adds to them or overrides them.
package sites

import (
	"bytes"
	"cmp"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

//go:embed providers.yaml
var shipped []byte

// Limits bound a site's mail. In a file, 0 is no bound and unset is the
// default's; once read, a figure of 0 or less (none) is no bound.
type Limits struct {
	// Sessions is how many sessions to the site may be open at once.
	Sessions int `yaml:"sessions" json:"sessions"`
	// MessagesPerSession is how many messages one session carries before
	// it quits and another opens.
	MessagesPerSession int `yaml:"messages_per_session" json:"messages_per_session"`
	// MessagesPerMinute and MessagesPerHour bound the messages sent.
	MessagesPerMinute float64 `yaml:"messages_per_minute" json:"messages_per_minute"`
	MessagesPerHour   float64 `yaml:"messages_per_hour" json:"messages_per_hour"`
	// ConnectionsPerMinute bounds the new connections.
	ConnectionsPerMinute float64 `yaml:"connections_per_minute" json:"connections_per_minute"`
	// MaxQueued is how many messages may wait in memory for the site;
	// those beyond are handed back to the outbox, to be claimed when the
	// site has room, so that a slow site holds none of the delivery slots
	// other sites need.
	MaxQueued int `yaml:"max_queued" json:"max_queued"`
}

// or fills the limits l leaves unset from d.
func (l Limits) or(d Limits) Limits {
	return Limits{
		Sessions:             cmp.Or(l.Sessions, d.Sessions),
		MessagesPerSession:   cmp.Or(l.MessagesPerSession, d.MessagesPerSession),
		MessagesPerMinute:    cmp.Or(l.MessagesPerMinute, d.MessagesPerMinute),
		MessagesPerHour:      cmp.Or(l.MessagesPerHour, d.MessagesPerHour),
		ConnectionsPerMinute: cmp.Or(l.ConnectionsPerMinute, d.ConnectionsPerMinute),
		MaxQueued:            cmp.Or(l.MaxQueued, d.MaxQueued),
	}
}

// Action is what a response rule does.
type Action string

const (
	// Throttle counts the reply as a throttling signal (Adapt).
	Throttle Action = "throttle"
	// Suspend stops the site's mail for the rule's time: its messages
	// are handed back, and none is tried.
	Suspend Action = "suspend"
	// Block says the site refuses the relay itself (a listed IP): the
	// recipients' verdict is soft whatever the code (never a bad
	// address), and the site is suspended for the rule's time, if set.
	Block Action = "block"
)

// Response is a rule on a reply's text.
type Response struct {
	// Match is found, case-insensitively, in the reply: its code, its
	// enhanced code and its text ("421 4.7.0 [TSS04] Messages from ...").
	Match  string        `yaml:"match"`
	Action Action        `yaml:"action"`
	For    time.Duration `yaml:"for"`
}

func (r Response) check() error {
	switch {
	case r.Match == "":
		return errors.New("a response rule has no match")
	case r.Action != Throttle && r.Action != Suspend && r.Action != Block:
		return fmt.Errorf("response %q: action %q: use throttle, suspend or block", r.Match, r.Action)
	case r.Action == Suspend && r.For <= 0:
		return fmt.Errorf("response %q: suspend needs a positive for (30m)", r.Match)
	}
	return nil
}

// Provider names a site by the suffixes of its MX hosts: every domain
// whose MX hosts end so is one site, whatever their exact set.
type Provider struct {
	Name      string   `yaml:"name"`
	MX        []string `yaml:"mx"`
	Limits    `yaml:",inline"`
	Responses []Response `yaml:"responses"`
}

// Adapt is AIMD: a site's share of its limits, from Floor to 1, is
// multiplied by Decrease on a throttling signal, at most once per
// Cooldown (one burst of refusals is one signal), and grows by Increase
// with each message the site accepts.
type Adapt struct {
	Decrease float64       `yaml:"decrease"`
	Increase float64       `yaml:"increase"`
	Floor    float64       `yaml:"floor"`
	Cooldown time.Duration `yaml:"cooldown"`
}

// Down is how a site that takes no connection is tested: one probe per
// interval, from Probe, doubled after each that fails, up to ProbeMax.
type Down struct {
	Probe    time.Duration `yaml:"probe"`
	ProbeMax time.Duration `yaml:"probe_max"`
}

// File is the shape of providers.yaml and of an operator's file.
type File struct {
	Default   Limits     `yaml:"default"`
	Adapt     Adapt      `yaml:"adapt"`
	Down      Down       `yaml:"down"`
	Responses []Response `yaml:"responses"`
	Providers []Provider `yaml:"providers"`
}

func parse(b []byte) (File, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return File{}, err
	}
	// A limit written 0 is no limit, where unset takes the default's:
	// the decoded figures cannot tell the two apart, the written ones can.
	var written struct {
		Default   writtenLimits   `yaml:"default"`
		Providers []writtenLimits `yaml:"providers"`
	}
	if err := yaml.Unmarshal(b, &written); err != nil {
		return File{}, err
	}
	if err := written.Default.unbound(&f.Default); err != nil {
		return File{}, fmt.Errorf("default: %w", err)
	}
	for i := range f.Providers {
		if err := written.Providers[i].unbound(&f.Providers[i].Limits); err != nil {
			return File{}, fmt.Errorf("provider %s: %w", f.Providers[i].Name, err)
		}
	}
	return f, nil
}

// none is a limit written 0: no limit, kept over a default's figure.
const none = -1

// writtenLimits are the limits a file writes, unset ones nil.
type writtenLimits struct {
	Sessions             *int     `yaml:"sessions"`
	MessagesPerSession   *int     `yaml:"messages_per_session"`
	MessagesPerMinute    *float64 `yaml:"messages_per_minute"`
	MessagesPerHour      *float64 `yaml:"messages_per_hour"`
	ConnectionsPerMinute *float64 `yaml:"connections_per_minute"`
	MaxQueued            *int     `yaml:"max_queued"`
}

// unbound marks the limits w writes 0 as none in l, and refuses negative
// ones.
func (w writtenLimits) unbound(l *Limits) error {
	negative := func(v *int) bool { return v != nil && *v < 0 }
	negativef := func(v *float64) bool { return v != nil && *v < 0 }
	if negative(w.Sessions) || negative(w.MessagesPerSession) || negativef(w.MessagesPerMinute) || negativef(w.MessagesPerHour) ||
		negativef(w.ConnectionsPerMinute) || negative(w.MaxQueued) {
		return errors.New("limits may not be negative (0 is no limit)")
	}
	if w.Sessions != nil && *w.Sessions == 0 {
		return errors.New("sessions 0: a site needs at least one session (leave it unset for delivery.mx_connections)")
	}
	zero := func(v *int) bool { return v != nil && *v == 0 }
	zerof := func(v *float64) bool { return v != nil && *v == 0 }
	for _, f := range []struct {
		written bool
		set     func()
	}{
		{zero(w.MessagesPerSession), func() { l.MessagesPerSession = none }},
		{zerof(w.MessagesPerMinute), func() { l.MessagesPerMinute = none }},
		{zerof(w.MessagesPerHour), func() { l.MessagesPerHour = none }},
		{zerof(w.ConnectionsPerMinute), func() { l.ConnectionsPerMinute = none }},
		{zero(w.MaxQueued), func() { l.MaxQueued = none }},
	} {
		if f.written {
			f.set()
		}
	}
	return nil
}

// Rules are the shipped rules with the operator's.
type Rules struct {
	File
	// sessions is the sessions at once of a site no rule bounds.
	sessions int
	// bySuffix is the providers by MX host suffix, lower case.
	bySuffix map[string]*Provider
}

// Load reads the shipped rules and adds the operator's (a file's bytes;
// nil for none). sessions is the sessions at once of a site that no rule
// bounds (delivery.mx_connections).
func Load(operator []byte, sessions int) (*Rules, error) {
	f, err := parse(shipped)
	if err != nil {
		return nil, fmt.Errorf("the shipped provider rules: %w", err)
	}
	if operator != nil {
		o, err := parse(operator)
		if err != nil {
			return nil, err
		}
		f = merge(f, o)
	}
	r := &Rules{File: f, sessions: sessions, bySuffix: map[string]*Provider{}}
	return r, r.check()
}

// Shipped is the shipped rules alone, with sessions as Load's. The
// shipped file is the repository's, and its test loads it: Shipped
// panics when it is broken.
func Shipped(sessions int) *Rules {
	r, err := Load(nil, sessions)
	if err != nil {
		panic(err)
	}
	return r
}

// merge lays the operator's file over the shipped one.
func merge(f, o File) File {
	f.Default = o.Default.or(f.Default)
	f.Adapt = Adapt{Decrease: cmp.Or(o.Adapt.Decrease, f.Adapt.Decrease), Increase: cmp.Or(o.Adapt.Increase, f.Adapt.Increase),
		Floor: cmp.Or(o.Adapt.Floor, f.Adapt.Floor), Cooldown: cmp.Or(o.Adapt.Cooldown, f.Adapt.Cooldown)}
	f.Down = Down{Probe: cmp.Or(o.Down.Probe, f.Down.Probe), ProbeMax: cmp.Or(o.Down.ProbeMax, f.Down.ProbeMax)}
	f.Responses = append(slices.Clone(o.Responses), f.Responses...)
	for _, p := range o.Providers {
		i := slices.IndexFunc(f.Providers, func(q Provider) bool { return q.Name == p.Name })
		if i < 0 {
			f.Providers = append(f.Providers, p)
			continue
		}
		f.Providers[i] = p
	}
	return f
}

func (r *Rules) check() error {
	a := r.Adapt
	switch {
	case a.Decrease <= 0 || a.Decrease >= 1:
		return fmt.Errorf("adapt.decrease %v: it multiplies a throttled site's share, and must be between 0 and 1", a.Decrease)
	case a.Increase <= 0 || a.Increase > 1:
		return fmt.Errorf("adapt.increase %v: it is added to a site's share per message accepted, and must be above 0 and at most 1", a.Increase)
	case a.Floor <= 0 || a.Floor > 1:
		return fmt.Errorf("adapt.floor %v: the least share of its limits a site keeps must be above 0 and at most 1", a.Floor)
	case a.Cooldown < 0:
		return errors.New("adapt.cooldown may not be negative")
	case r.Down.Probe <= 0 || r.Down.ProbeMax < r.Down.Probe:
		return fmt.Errorf("down.probe %s and probe_max %s: both positive, probe_max at least probe", r.Down.Probe, r.Down.ProbeMax)
	}
	for _, rr := range r.Responses {
		if err := rr.check(); err != nil {
			return err
		}
	}
	for i := range r.Providers {
		p := &r.Providers[i]
		if err := r.addProvider(p); err != nil {
			return fmt.Errorf("provider %q: %w", p.Name, err)
		}
	}
	return nil
}

func (r *Rules) addProvider(p *Provider) error {
	if p.Name == "" || len(p.MX) == 0 {
		return errors.New("a provider needs a name and MX host suffixes")
	}
	for _, rr := range p.Responses {
		if err := rr.check(); err != nil {
			return err
		}
	}
	for _, s := range p.MX {
		s = strings.Trim(strings.ToLower(s), ".")
		if other := r.bySuffix[s]; other != nil {
			return fmt.Errorf("MX suffix %s is provider %s's too", s, other.Name)
		}
		r.bySuffix[s] = p
	}
	return nil
}

// Site is where a domain's mail goes, as the rules see it.
type Site struct {
	// Key names the site: the provider's name, or the domain's MX hosts,
	// sorted, when no provider has them.
	Key string
	// Provider is the provider's name; empty for a site of no provider.
	Provider  string
	Limits    Limits
	Responses []Response
}

// Of is the site of a domain whose mail goes to hosts: the provider of
// the most preferred host that one matches by its longest suffix, or the
// hosts themselves.
func (r *Rules) Of(hosts []string) Site {
	for _, h := range hosts {
		if p := r.provider(h); p != nil {
			return Site{Key: p.Name, Provider: p.Name, Limits: r.limits(p.Limits), Responses: append(slices.Clone(p.Responses), r.Responses...)}
		}
	}
	names := make([]string, len(hosts))
	for i, h := range hosts {
		names[i] = strings.Trim(strings.ToLower(h), ".")
	}
	slices.Sort(names)
	return Site{Key: strings.Join(slices.Compact(names), " "), Limits: r.limits(Limits{}), Responses: r.Responses}
}

func (r *Rules) limits(l Limits) Limits {
	l = l.or(r.Default)
	if l.Sessions == 0 {
		l.Sessions = r.sessions
	}
	return l
}

// provider is the provider whose longest suffix host ends with.
func (r *Rules) provider(host string) *Provider {
	host = strings.Trim(strings.ToLower(host), ".")
	for name := host; name != ""; {
		if p := r.bySuffix[name]; p != nil {
			return p
		}
		_, rest, ok := strings.Cut(name, ".")
		if !ok {
			return nil
		}
		name = rest
	}
	return nil
}

// Respond is the first of the site's response rules that reply matches.
func (s Site) Respond(reply string) (Response, bool) {
	reply = strings.ToLower(reply)
	for _, r := range s.Responses {
		if strings.Contains(reply, strings.ToLower(r.Match)) {
			return r, true
		}
	}
	return Response{}, false
}
