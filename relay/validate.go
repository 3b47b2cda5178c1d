package relay

import (
	"errors"
	"fmt"

	"github.com/genropy/postino/relay/mailbox"
)

// Validate reports every setting that would stop serve before it opens
// anything: Check's, then, once those pass, what serve reads and combines
// without reaching the network: the secrets in files and variables (the
// admin token, AUTH, route and mailbox passwords, DSNs), the SMTP key
// pair, the routes with their TLS and AUTH, the DKIM keys, the PEC trust
// bundle, the outbox's DSN or table. New runs it first, with the same
// functions that wire the relay afterwards, so that serve, config check and
// config print say the same; getenv gives the variables secrets come from.
func (c Config) Validate(getenv func(string) string) error {
	if err := c.Check(); err != nil {
		return err
	}
	e := c.Effective(getenv)
	var errs []error
	// In the order New meets them.
	for _, check := range []func(func(string) string) error{
		e.checkOutboxAccess, fails(e.Admin.Token), fails(e.intakeConfig), fails(e.deliveryRoutes), fails(e.tlsPolicies),
		func(func(string) string) error { _, err := e.DKIM.Keyring(); return err },
		e.checkSubmissionDSNs,
		fails(func(getenv func(string) string) ([]mailbox.Config, error) {
			return mailboxConfigs("bounces.mailboxes", e.Bounces.Mailboxes, "", getenv)
		}),
		func(func(string) string) error { _, err := e.PEC.roots(); return err },
		func(func(string) string) error {
			if e.Unsubscribe.BaseURL == "" && e.Unsubscribe.Listen == "" {
				return nil
			}
			_, err := e.unsubscribeKeys()
			return err
		},
		fails(func(getenv func(string) string) ([]mailbox.Config, error) {
			return mailboxConfigs("pec.accounts", e.PEC.mailboxes(), "", getenv)
		}),
	} {
		errs = append(errs, check(getenv))
	}
	return errors.Join(errs...)
}

// fails is a step of the wiring run for its error alone.
func fails[T any](step func(getenv func(string) string) (T, error)) func(func(string) string) error {
	return func(getenv func(string) string) error {
		_, err := step(getenv)
		return err
	}
}

// checkSubmissionDSNs reads the DSN of every submissions table, as
// openSubmissions does.
func (c *Config) checkSubmissionDSNs(getenv func(string) string) error {
	for i, s := range c.Submissions {
		if _, err := dsnOf(fmt.Sprintf("submissions[%d]", i), s.DSN, s.DSNFile, s.DSNEnv, getenv); err != nil {
			return err
		}
	}
	return nil
}
