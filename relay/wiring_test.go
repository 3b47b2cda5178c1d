package relay

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/internal/backoff"
	"github.com/genropy/postino/plugins"
	"github.com/genropy/postino/relay/mailbox"
)

func TestPluginSpecs(t *testing.T) {
	c := DefaultConfig()
	c.Plugins = []PluginConfig{
		{Path: "/p/bare", MaxAttempts: 3, Env: map[string]string{"B": "2", "A": "1"}},
		{Name: "hook", Path: "/p/hook", Timeout: Duration(time.Minute), MaxAge: Duration(time.Hour),
			Retry: PluginRetryConfig{First: Duration(5 * time.Second), Max: Duration(time.Minute), Jitter: 0.5}},
		{Path: "/p/nobound"},
	}
	def := backoff.Schedule{First: time.Second, Max: 5 * time.Minute, Jitter: 0.2}
	want := []plugins.Spec{
		// max_attempts bounds the tries: no max_age is added. The name
		// is the file's.
		{Name: "bare", Path: "/p/bare", Env: []string{"A=1", "B=2"}, Timeout: 10 * time.Second, MaxAttempts: 3, Retry: def},
		{Name: "hook", Path: "/p/hook", Timeout: time.Minute, MaxAge: time.Hour,
			Retry: backoff.Schedule{First: 5 * time.Second, Max: time.Minute, Jitter: 0.5}},
		// Neither bound given: the default max_age, so that tries end.
		{Name: "nobound", Path: "/p/nobound", Timeout: 10 * time.Second, MaxAge: 24 * time.Hour, Retry: def},
	}
	if got := c.pluginSpecs(); !reflect.DeepEqual(got, want) {
		t.Errorf("specs\n%+v\nwant\n%+v", got, want)
	}
}

func TestPECMailbox(t *testing.T) {
	a := PECAccountConfig{Address: "ufficio@pec.example.it", PasswordEnv: "PEC_PW",
		IMAP: "imaps.pec.example.it:993", SMTP: "smtps.pec.example.it:465"}
	got, err := a.mailbox().mailbox("relay-1/127.0.0.1:2525", func(k string) string { return map[string]string{"PEC_PW": "pw"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := mailbox.Config{Name: "pec ufficio@pec.example.it", Addr: "imaps.pec.example.it:993", TLS: mailbox.TLSImplicit,
		Username: "ufficio@pec.example.it", Password: "pw", Folder: "INBOX", Processed: "Processed", Unmatched: "Unmatched",
		Poll: time.Minute, Lease: mailboxLease, Owner: "relay-1/127.0.0.1:2525"}
	if got != want {
		t.Errorf("mailbox\n%+v\nwant\n%+v", got, want)
	}
}

func TestMailboxErrors(t *testing.T) {
	tests := []struct {
		name string
		mc   MailboxConfig
		want string
	}{
		{"no host", MailboxConfig{Username: "u", PasswordEnv: "PW"}, "needs host and username"},
		{"plain text off loopback", MailboxConfig{Host: "imap.example.com", Username: "u", PasswordEnv: "PW", TLS: mailbox.TLSNone}, "loopback only"},
		{"no password", MailboxConfig{Host: "imap.example.com", Username: "u", PasswordEnv: "UNSET"}, "set password_file or password_env"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.mc.mailbox("owner", func(k string) string { return map[string]string{"PW": "pw"}[k] })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to say %q", err, tt.want)
			}
		})
	}
}
