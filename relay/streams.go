package relay

import (
	"errors"
	"fmt"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/relay/admin"
	"github.com/genropy/postino/relay/brake"
	"github.com/genropy/postino/relay/delivery"
	"github.com/genropy/postino/relay/suppression"
)

// StreamConfig is a kind of mail with its own settings: a newsletter's
// unsubscribes never hold back a password reset.
type StreamConfig struct {
	// Name is what X-Postino-Stream and routes' stream name.
	Name string `yaml:"name"`
	// Bulk gives the stream's messages the one-click unsubscribe fields
	// (List-Unsubscribe and List-Unsubscribe-Post, signed by DKIM), as
	// Gmail and Yahoo require of bulk senders; needs unsubscribe.base_url.
	Bulk bool `yaml:"bulk"`
	// Mode is record (the message is taken, its suppressed recipients end
	// suppressed and are never sent) or refuse (RCPT of a suppressed
	// recipient is answered 550 5.7.1).
	Mode string `yaml:"mode"`
	// Blocks lists the reasons whose entries hold the stream back:
	// hard_bounce (always), complaint, unsubscribe, manual, import. Empty
	// is all of them.
	Blocks []string `yaml:"blocks"`
}

// SuppressionConfig is when the relay's findings suppress an address.
type SuppressionConfig struct {
	// HardBounce: a hard verdict (the address does not exist, at RCPT or
	// in a DSN) suppresses the address for every stream.
	HardBounce SuppressionRuleConfig `yaml:"hard_bounce"`
	// Complaint: a complaint (ARF) suppresses the address for the stream
	// of the message complained about.
	Complaint SuppressionRuleConfig `yaml:"complaint"`
}

// SuppressionRuleConfig is one rule.
type SuppressionRuleConfig struct {
	// Off turns the rule off: the finding is reported, the address not
	// suppressed.
	Off bool `yaml:"off"`
	// After is how many findings within Within suppress the address.
	After int `yaml:"after"`
	// Within is the window of After.
	Within Duration `yaml:"within"`
	// Expires ends the entry this long after it is made; 0 keeps it until
	// an operator removes it.
	Expires Duration `yaml:"expires"`
}

// checkStreams checks the streams, the rules, and the routes' streams.
func (c *Config) checkStreams() error {
	var errs []error
	seen := map[string]bool{}
	for i, s := range c.Streams {
		key := fmt.Sprintf("streams[%d]", i)
		if err := backends.CheckStream(s.Name); err != nil {
			errs = append(errs, fmt.Errorf("%s.name: %w", key, err))
		}
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("%s: stream %s is configured twice", key, s.Name))
		}
		seen[s.Name] = true
		switch s.Mode {
		case "", suppression.ModeRecord, suppression.ModeRefuse:
		default:
			errs = append(errs, fmt.Errorf("%s.mode %q: use record or refuse", key, s.Mode))
		}
		for _, b := range s.Blocks {
			if _, err := backends.ParseSuppressionReason(b); err != nil {
				errs = append(errs, fmt.Errorf("%s.blocks: %w", key, err))
			}
		}
		if s.Bulk && c.Unsubscribe.BaseURL == "" {
			errs = append(errs, fmt.Errorf("%s: bulk stream %s needs unsubscribe.base_url (and unsubscribe.keys): bulk mail must carry a one-click unsubscribe", key, s.Name))
		}
	}
	for _, r := range c.routeConfigs() {
		if r.cfg.Stream != "" && r.cfg.Stream != suppression.Transactional && !seen[r.cfg.Stream] {
			errs = append(errs, fmt.Errorf("%s.stream %q: no stream of that name is configured under streams", r.key, r.cfg.Stream))
		}
	}
	for _, r := range []struct {
		key  string
		rule SuppressionRuleConfig
	}{{"suppression.hard_bounce", c.Suppression.HardBounce}, {"suppression.complaint", c.Suppression.Complaint}} {
		if r.rule.After < 0 || r.rule.Within < 0 || r.rule.Expires < 0 {
			errs = append(errs, fmt.Errorf("%s: after, within and expires may not be negative", r.key))
		}
		if r.rule.After > 1 && r.rule.Within == 0 {
			errs = append(errs, fmt.Errorf("%s: after %d needs within, the window the findings must fall in (for example 720h)", r.key, r.rule.After))
		}
	}
	return errors.Join(errs...)
}

// namedRoute is a route's configuration with its key in the file.
type namedRoute struct {
	key, name string
	cfg       RouteConfig
}

// routeConfigs lists the routes with their keys and names.
func (c *Config) routeConfigs() []namedRoute {
	out := []namedRoute{{"routes.default", delivery.DefaultRoute, c.Routes.Default}}
	for i, rc := range c.Routes.Senders {
		out = append(out, namedRoute{fmt.Sprintf("routes.senders[%d]", i), rc.Name, rc})
	}
	return out
}

// suppressionPolicy is the policy the configuration describes.
func (c *Config) suppressionPolicy(routes *delivery.Routes, hostname string) suppression.Config {
	pc := suppression.Config{Streams: map[string]suppression.Stream{}, RouteStreams: map[string]string{},
		HardBounce: c.Suppression.HardBounce.rule(), Complaint: c.Suppression.Complaint.rule(), By: "relay " + hostname,
		Choose: routes.Choose}
	for _, s := range c.Streams {
		st := suppression.Stream{Bulk: s.Bulk, Mode: s.Mode}
		if st.Mode == "" {
			st.Mode = suppression.ModeRecord
		}
		for _, b := range s.Blocks {
			r, _ := backends.ParseSuppressionReason(b)
			st.Blocks = append(st.Blocks, r)
		}
		pc.Streams[s.Name] = st
	}
	for _, r := range c.routeConfigs() {
		if r.cfg.Stream != "" {
			pc.RouteStreams[r.name] = r.cfg.Stream
		}
	}
	return pc
}

func (r SuppressionRuleConfig) rule() suppression.Rule {
	return suppression.Rule{Off: r.Off, Need: r.After, Within: time.Duration(r.Within), Expires: time.Duration(r.Expires)}
}

// UnsubscribeConfig is the one-click unsubscribe (RFC 8058) of bulk
// streams: the fields their messages get, and the listener that serves
// their URLs (docs/unsubscribe.md).
type UnsubscribeConfig struct {
	// Listen is the listener's host:port, apart from the admin API's
	// because it faces the internet, behind the app's HTTPS ingress;
	// empty serves none.
	Listen string `yaml:"listen"`
	// BaseURL is the https: URL the ingress maps to the listener; the
	// token is added to its path.
	BaseURL string `yaml:"base_url"`
	// Mailto, when set, is the address of List-Unsubscribe's mailto:; it
	// must reach a bounce mailbox (bounces.mailboxes).
	Mailto string `yaml:"mailto"`
	// Keys sign the tokens: each file:PATH or env:NAME, of 32 bytes or
	// more. The first signs; the others still verify tokens made within
	// Grace, so that a key can be rotated.
	Keys []string `yaml:"keys"`
	// Grace is how long an older key keeps verifying the tokens it made.
	Grace Duration `yaml:"grace"`
	// Rate and Burst bound the requests a second of one client (an IPv6
	// client by its /64).
	Rate  float64 `yaml:"rate"`
	Burst int     `yaml:"burst"`
	// TrustedProxies are the networks (CIDR) whose X-Forwarded-For is
	// believed: the ingress's.
	TrustedProxies []string `yaml:"trusted_proxies"`
}

// BrakeConfig stops a batch (X-Postino-Batch) whose list is bad, before the
// providers judge its sender by it: once MinSent of its recipients were
// tried, a share of hard verdicts over HardRate, or of complaints over
// ComplaintRate, suspends it, until an operator activates it again.
type BrakeConfig struct {
	// Off turns the brake off; the batches are still counted.
	Off bool `yaml:"off"`
	// MinSent is how many recipients of a batch must have been tried
	// before its rates count.
	MinSent int `yaml:"min_sent"`
	// HardRate is the largest share (0.05: 5 %) of hard verdicts.
	HardRate float64 `yaml:"hard_rate"`
	// ComplaintRate is the largest share of complaints (0.003: Gmail's
	// 0.3 % ceiling).
	ComplaintRate float64 `yaml:"complaint_rate"`
}

func (b BrakeConfig) thresholds() brake.Thresholds {
	return brake.Thresholds{Off: b.Off, MinSent: int64(b.MinSent), HardRate: b.HardRate, ComplaintRate: b.ComplaintRate}
}

func (b BrakeConfig) check() error {
	if b.Off {
		return nil
	}
	if b.MinSent <= 0 || b.HardRate <= 0 || b.HardRate >= 1 || b.ComplaintRate <= 0 || b.ComplaintRate >= 1 {
		return fmt.Errorf("brake: min_sent must be positive, hard_rate and complaint_rate between 0 and 1 (5%% is 0.05); or set brake.off")
	}
	return nil
}

func (b BrakeConfig) adminThresholds() admin.Thresholds {
	return admin.Thresholds{MinSent: int64(b.MinSent), MaxHardRate: b.HardRate, MaxComplaintRate: b.ComplaintRate, Off: b.Off}
}
