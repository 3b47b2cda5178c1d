package relay

import (
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/genropy/postino/relay/delivery"
	"github.com/genropy/postino/relay/intake"
	"github.com/genropy/postino/relay/mailbox"
)

// The defaults of settings that zero leaves to the relay.
const (
	defaultRouteConnections = 20
	defaultMailboxFolder    = "INBOX"
	defaultProcessedFolder  = "Processed"
	defaultUnmatchedFolder  = "Unmatched"
	defaultMailboxPoll      = Duration(time.Minute)
)

// loopbackNetworks may send without AUTH when smtp.allow_networks is unset.
var loopbackNetworks = []string{"127.0.0.0/8", "::1/128"}

// Effective is the configuration as serve runs it: each setting left empty
// or zero to mean a default holds that default (the machine's host name,
// the outbox file, a mailbox's port and folders, a plugin's name and
// retries), so that config print shows what runs and a file written from
// it runs the same. A zero that means "none" (no TTL, no DKIM expiry, a
// limit off) stays zero. getenv gives the variables some defaults come
// from (EMAIL_OUTBOX_TABLE, AWS_ENDPOINT_URL).
func (c Config) Effective(getenv func(string) string) Config {
	c.Hostname = hostname(c.Hostname)
	if c.SMTP.AllowNetworks == nil {
		c.SMTP.AllowNetworks = slices.Clone(loopbackNetworks)
	}
	if s, _ := c.store(); s.defaults != nil {
		s.defaults(&c, getenv)
	}
	if c.Spool.Store != SpoolOutbox {
		c.Spool.MinFreeSpace = ByteSize(c.minFreeSpace())
	}
	c.Routes.Default = c.Routes.Default.withDefaults(delivery.DefaultRoute)
	c.Routes.Senders = slices.Clone(c.Routes.Senders)
	for i, rc := range c.Routes.Senders {
		c.Routes.Senders[i] = rc.withDefaults(senderRouteName(rc, i))
	}
	c.Bounces.Mailboxes = slices.Clone(c.Bounces.Mailboxes)
	for i, mc := range c.Bounces.Mailboxes {
		c.Bounces.Mailboxes[i] = mc.withDefaults()
	}
	c.PEC.Accounts = slices.Clone(c.PEC.Accounts)
	for i, a := range c.PEC.Accounts {
		c.PEC.Accounts[i] = a.withDefaults()
	}
	c.Plugins = slices.Clone(c.Plugins)
	for i, p := range c.Plugins {
		c.Plugins[i] = p.withDefaults()
	}
	return c
}

// senderRouteName names sender route i: its own name, or its place.
func senderRouteName(rc RouteConfig, i int) string {
	if rc.Name != "" {
		return rc.Name
	}
	return fmt.Sprintf("sender-%d", i+1)
}

// withDefaults fills in a route's name, connections and TLS mode:
// opportunistic for MX delivery (its only one), none for a smarthost.
func (rc RouteConfig) withDefaults(name string) RouteConfig {
	rc.Name = name
	if rc.MaxConnections == 0 {
		rc.MaxConnections = defaultRouteConnections
	}
	if rc.TLS == "" && rc.Smarthost == "" {
		rc.TLS = delivery.TLSOpportunistic
	} else if rc.TLS == "" {
		rc.TLS = delivery.TLSNone
	}
	return rc
}

// withDefaults fills in a mailbox's TLS mode, port, name, folders and poll.
func (mc MailboxConfig) withDefaults() MailboxConfig {
	if mc.TLS == "" {
		mc.TLS = mailbox.TLSImplicit
	}
	if mc.Port == 0 {
		mc.Port = mailbox.DefaultPort(mc.TLS)
	}
	if mc.Name == "" {
		mc.Name = mc.Username + "@" + mc.Host
	}
	if mc.Folder == "" {
		mc.Folder = defaultMailboxFolder
	}
	if mc.ProcessedFolder == "" {
		mc.ProcessedFolder = defaultProcessedFolder
	}
	if mc.UnmatchedFolder == "" {
		mc.UnmatchedFolder = defaultUnmatchedFolder
	}
	if mc.Poll <= 0 {
		mc.Poll = defaultMailboxPoll
	}
	return mc
}

// withDefaults fills in a PEC account's login, receipt kind and the
// defaults of its mailbox.
func (a PECAccountConfig) withDefaults() PECAccountConfig {
	a.Username = a.username()
	if r, err := intake.ParsePECReceipt(a.Receipt); err == nil {
		a.Receipt = r
	}
	m := a.mailbox().withDefaults()
	a.Folder, a.ProcessedFolder, a.UnmatchedFolder, a.Poll = m.Folder, m.ProcessedFolder, m.UnmatchedFolder, m.Poll
	return a
}

// withDefaults fills in a plugin's name and the settings it leaves unset
// from DefaultPlugin; with neither max_attempts nor max_age, its events
// are parked after DefaultPlugin's max_age.
func (p PluginConfig) withDefaults() PluginConfig {
	def := DefaultPlugin("")
	if p.Name == "" {
		p.Name = filepath.Base(p.Path)
	}
	if p.Timeout == 0 {
		p.Timeout = def.Timeout
	}
	if p.Retry.First == 0 {
		p.Retry.First = def.Retry.First
	}
	if p.Retry.Max == 0 {
		p.Retry.Max = def.Retry.Max
	}
	if p.Retry.Jitter == 0 {
		p.Retry.Jitter = def.Retry.Jitter
	}
	if p.MaxAttempts == 0 && p.MaxAge == 0 {
		p.MaxAge = def.MaxAge
	}
	return p
}
