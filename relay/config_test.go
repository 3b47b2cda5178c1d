package relay

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "postino.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadConfig(t *testing.T) {
	file := writeFile(t, `
data_dir: /srv/postino
smtp:
  listen: 0.0.0.0:2525
  max_message_size: 10MiB
  allow_networks: [172.18.0.0/16]
  auth:
    accounts:
      - username: app
        password_file: /run/secrets/app
retention: 3d
`)
	tests := []struct {
		name  string
		path  string
		env   []string
		check func(t *testing.T, c Config)
	}{
		{name: "defaults", check: func(t *testing.T, c Config) {
			if c.SMTP.Listen != "127.0.0.1:2525" || c.Admin.Listen != "127.0.0.1:8525" || c.DataDir != "./var" ||
				c.Retention.D() != 7*24*time.Hour || c.Outbox.Backend != "bolt" {
				t.Errorf("defaults %+v", c)
			}
		}},
		{name: "file", path: file, check: func(t *testing.T, c Config) {
			if c.DataDir != "/srv/postino" || c.SMTP.Listen != "0.0.0.0:2525" || c.SMTP.MaxMessageSize != 10<<20 ||
				c.Retention.D() != 72*time.Hour || len(c.SMTP.AllowNetworks) != 1 || c.SMTP.Auth.Accounts[0].PasswordFile != "/run/secrets/app" {
				t.Errorf("from file %+v", c)
			}
			if c.Admin.Listen != "127.0.0.1:8525" {
				t.Errorf("a key the file does not set lost its default: %s", c.Admin.Listen)
			}
		}},
		{name: "env over file", path: file, env: []string{"POSTINO_DATA_DIR=/data", "POSTINO_SMTP_MAX_RECIPIENTS=50",
			"POSTINO_SMTP_ALLOW_NETWORKS=10.0.0.0/8, 192.168.0.0/16", "POSTINO_RETENTION=36h", "HOME=/root"},
			check: func(t *testing.T, c Config) {
				if c.DataDir != "/data" || c.SMTP.MaxRecipients != 50 || len(c.SMTP.AllowNetworks) != 2 ||
					c.SMTP.AllowNetworks[1] != "192.168.0.0/16" || c.Retention.D() != 36*time.Hour {
					t.Errorf("from env %+v", c)
				}
			}},
		{name: "spool store from env", env: []string{"POSTINO_SPOOL_STORE=outbox"},
			check: func(t *testing.T, c Config) {
				if c.Spool.Store != SpoolOutbox {
					t.Errorf("spool.store %q", c.Spool.Store)
				}
			}},
		{name: "flag twins", env: []string{"POSTINO_LISTEN=127.0.0.1:2600", "POSTINO_ADMIN=127.0.0.1:8600", "POSTINO_DATA=/d", "POSTINO_CONFIG=/ignored"},
			check: func(t *testing.T, c Config) {
				if c.SMTP.Listen != "127.0.0.1:2600" || c.Admin.Listen != "127.0.0.1:8600" || c.DataDir != "/d" {
					t.Errorf("twins %+v", c)
				}
			}},
		{name: "full name wins over twin", env: []string{"POSTINO_SMTP_LISTEN=127.0.0.1:2700", "POSTINO_LISTEN=127.0.0.1:2600"},
			check: func(t *testing.T, c Config) {
				if c.SMTP.Listen != "127.0.0.1:2700" {
					t.Errorf("listen %s", c.SMTP.Listen)
				}
			}},
		{name: "records from env", env: []string{`POSTINO_SMTP_AUTH_ACCOUNTS=[{"username": "app", "password_env": "APP_PW"}]`},
			check: func(t *testing.T, c Config) {
				if len(c.SMTP.Auth.Accounts) != 1 || c.SMTP.Auth.Accounts[0].PasswordEnv != "APP_PW" {
					t.Errorf("accounts %+v", c.SMTP.Auth.Accounts)
				}
			}},
		{name: "DKIM from env", env: []string{"POSTINO_DKIM_REQUIRED=true", "POSTINO_DKIM_EXPIRY=7d", "POSTINO_DKIM_OVERSIGN=From, Subject",
			`POSTINO_DKIM_KEYS=[{domain: example.com, selector: s1, key_file: /k/s1.pem}, {domain: example.com, selector: s0, key_file: /k/s0.pem, active: false}]`},
			check: func(t *testing.T, c Config) {
				d := c.DKIM
				if !d.Required || d.Expiry.D() != 7*24*time.Hour || len(d.Oversign) != 2 || len(d.Keys) != 2 ||
					d.Keys[0].Active != nil || d.Keys[1].Active == nil || *d.Keys[1].Active || d.Canonicalization != "relaxed/relaxed" {
					t.Errorf("dkim %+v", d)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := LoadConfig(tt.path, tt.env)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestLoadConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		file string
		env  []string
		want string
	}{
		{name: "unknown variable", env: []string{"POSTINO_SMTP_LISTN=x"}, want: "POSTINO_SMTP_LISTN is not a setting; did you mean POSTINO_SMTP_LISTEN?"},
		{name: "unknown variable near none", env: []string{"POSTINO_PORT=2525"},
			want: "environment variable POSTINO_PORT is not a setting: a setting's variable is POSTINO_ and its key in capitals"},
		{name: "a link's name with another value", env: []string{"POSTINO_SERVICE_HOST=postino.default.svc"},
			want: "POSTINO_SERVICE_HOST is not a setting"},
		{name: "every variable at fault", env: []string{"POSTINO_SMTP_LISTN=x", "POSTINO_RETENTION=a week"},
			want: "POSTINO_RETENTION (retention): duration \"a week\""},
		{name: "bad number", env: []string{"POSTINO_SMTP_MAX_RECIPIENTS=many"}, want: "POSTINO_SMTP_MAX_RECIPIENTS"},
		{name: "bad duration", env: []string{"POSTINO_RETENTION=a week"}, want: "7d"},
		{name: "bad size", env: []string{"POSTINO_SMTP_MAX_MESSAGE_SIZE=big"}, want: "25MiB"},
		{name: "unknown field in a list variable", env: []string{`POSTINO_DKIM_KEYS=[{"domain": "example.com", "selector": "s1", "keyfile": "/k"}]`},
			want: "keyfile is not a setting; did you mean key_file?"},
		{name: "unknown key", file: "smtp:\n  listem: x\n", want: "listem is not a setting; did you mean listen?"},
		{name: "unknown section", file: "smpt:\n  listen: x\n", want: "smpt is not a setting; did you mean smtp?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.file != "" {
				path = writeFile(t, tt.file)
			}
			_, err := LoadConfig(path, tt.env)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to say %q", err, tt.want)
			}
		})
	}
	if _, err := LoadConfig(filepath.Join(t.TempDir(), "missing.yaml"), nil); err == nil {
		t.Error("a missing config file was accepted")
	}
	if _, err := LoadConfig(writeFile(t, ""), nil); err != nil {
		t.Errorf("an empty config file: %v", err)
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string // empty: valid
	}{
		{name: "default"},
		{name: "open relay", mutate: func(c *Config) { c.SMTP.Listen = "0.0.0.0:2525" }, want: "smtp.allow_networks"},
		{name: "open relay on a public address", mutate: func(c *Config) { c.SMTP.Listen = "192.0.2.10:2525" }, want: "anyone there could send"},
		{name: "all interfaces by empty host", mutate: func(c *Config) { c.SMTP.Listen = ":2525" }, want: "allowed networks"},
		{name: "listed networks", mutate: func(c *Config) {
			c.SMTP.Listen = "0.0.0.0:2525"
			c.SMTP.AllowNetworks = []string{"172.18.0.0/16"}
		}},
		{name: "auth", mutate: func(c *Config) {
			c.SMTP.Listen = "0.0.0.0:2525"
			c.SMTP.Auth.Accounts = []Account{{Username: "app", PasswordEnv: "X"}}
			c.SMTP.TLS = TLSConfig{CertFile: "c", KeyFile: "k"}
		}},
		{name: "auth without tls", mutate: func(c *Config) {
			c.SMTP.Auth.Accounts = []Account{{Username: "app", PasswordEnv: "X"}}
		}, want: "no TLS"},
		{name: "account without secret", mutate: func(c *Config) {
			c.SMTP.Auth.Accounts = []Account{{Username: "app"}}
			c.SMTP.Auth.AllowInsecure = true
		}, want: "password_file"},
		{name: "bad network", mutate: func(c *Config) { c.SMTP.AllowNetworks = []string{"10.0.0.0/33"} }, want: "neither a network"},
		{name: "bad bare newline mode", mutate: func(c *Config) { c.SMTP.BareNewlines = "fix" }, want: "normalize or reject"},
		{name: "half tls", mutate: func(c *Config) { c.SMTP.TLS.CertFile = "c" }, want: "both cert_file and key_file"},
		{name: "bad listen", mutate: func(c *Config) { c.Admin.Listen = "8525" }, want: "admin.listen"},
		{name: "unknown backend", mutate: func(c *Config) { c.Outbox.Backend = "sqlite" }, want: "use bolt"},
		{name: "dns servers", mutate: func(c *Config) {
			c.Delivery.DNS.Servers = []string{"127.0.0.1:53", "[::1]:5353"}
			c.Delivery.DNS.Validating = true
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			if tt.mutate != nil {
				tt.mutate(&c)
			}
			err := c.Check()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want it to say %q", err, tt.want)
			}
		})
	}
}

// checkErrors are the errors Check can report, one a message: each makes
// the smallest change to DefaultConfig that meets it, and want is the key
// the message names.
var checkErrors = []struct {
	name   string
	mutate func(*Config)
	want   string
}{
	{"no data directory", func(c *Config) { c.DataDir = "" }, "data_dir"},
	{"unsubscribe over http", func(c *Config) { c.Unsubscribe.BaseURL = "http://unsub.example.com" }, "unsubscribe.base_url"},
	{"unsubscribe URL that breaks the field", func(c *Config) { c.Unsubscribe.BaseURL = "https://unsub.example.com/a>b" }, "unsubscribe.base_url"},
	{"unsubscribe mailto with a name", func(c *Config) {
		c.Unsubscribe.BaseURL, c.Unsubscribe.Mailto = "https://unsub.example.com", "Unsub <u@example.com>"
	}, "unsubscribe.mailto"},
	{"bulk stream without unsubscribe", func(c *Config) { c.Streams = []StreamConfig{{Name: "news", Bulk: true}} }, "needs unsubscribe.base_url"},
	{"stream mode", func(c *Config) { c.Streams = []StreamConfig{{Name: "news", Mode: "drop"}} }, "streams[0].mode"},
	{"stream blocks", func(c *Config) { c.Streams = []StreamConfig{{Name: "news", Blocks: []string{"spam"}}} }, "streams[0].blocks"},
	{"route of no stream", func(c *Config) { c.Routes.Default.Stream = "news" }, "routes.default.stream"},
	{"rule after without within", func(c *Config) { c.Suppression.HardBounce.After = 2 }, "suppression.hard_bounce: after 2 needs within"},
	{"brake rate", func(c *Config) { c.Brake.HardRate = 5 }, "brake:"},
	{"smtp listen", func(c *Config) { c.SMTP.Listen = "2525" }, "smtp.listen"},
	{"admin listen", func(c *Config) { c.Admin.Listen = "8525" }, "admin.listen"},
	{"allowed network", func(c *Config) { c.SMTP.AllowNetworks = []string{"lan"} }, "smtp.allow_networks"},
	{"bare newlines", func(c *Config) { c.SMTP.BareNewlines = "fix" }, "smtp.bare_newlines"},
	{"line length", func(c *Config) { c.SMTP.MaxLineLength = 77 }, "smtp.max_line_length"},
	{"message size", func(c *Config) { c.SMTP.MaxMessageSize = 0 }, "smtp.max_message_size"},
	{"tls pair", func(c *Config) { c.SMTP.TLS.KeyFile = "k" }, "smtp.tls"},
	{"account without username", func(c *Config) {
		c.SMTP.Auth.Accounts = []Account{{PasswordEnv: "X"}}
	}, "smtp.auth.accounts[0]"},
	{"account with two secrets", func(c *Config) {
		c.SMTP.Auth.Accounts = []Account{{Username: "app", PasswordFile: "f", PasswordEnv: "X"}}
	}, "password_env"},
	{"auth without tls", func(c *Config) {
		c.SMTP.Auth.Accounts = []Account{{Username: "app", PasswordEnv: "X"}}
	}, "smtp.auth.allow_insecure"},
	{"open relay", func(c *Config) { c.SMTP.Listen = "[::]:2525" }, "smtp.allow_networks"},
	{"two admin tokens", func(c *Config) { c.Admin.TokenFile, c.Admin.TokenEnv = "f", "T" }, "token_env"},
	{"admin without token", func(c *Config) { c.Admin.Listen = "0.0.0.0:8525" }, "admin.token_file"},
	{"mysql without dsn", func(c *Config) { c.Outbox.Backend = "mysql" }, "outbox.mysql"},
	{"postgres without dsn", func(c *Config) { c.Outbox.Backend = "postgres" }, "outbox.postgres needs exactly one of dsn"},
	{"backend", func(c *Config) { c.Outbox.Backend = "sqlite" }, "outbox.backend"},
	{"spool store", func(c *Config) { c.Spool.Store = "s3" }, "spool.store"},
	{"spool store outbox with bolt", func(c *Config) { c.Spool.Store = SpoolOutbox }, "bbolt"},
	{"intake", func(c *Config) { c.Intake.Poll = 0 }, "intake.poll"},
	{"delivery", func(c *Config) { c.Delivery.MXPort = 0 }, "mx_port"},
	{"route down after", func(c *Config) { c.Delivery.RouteDownAfter = 0 }, "delivery.route_down_after must be positive"},
	{"delivery timeouts", func(c *Config) { c.Delivery.Timeouts.DataEnd = 0 }, "delivery.timeouts"},
	{"dns confirm after", func(c *Config) { c.Delivery.DNS.ConfirmAfter = 0 }, "delivery.dns.confirm_after"},
	{"dns validating without servers", func(c *Config) { c.Delivery.DNS.Validating = true }, "delivery.dns.validating needs delivery.dns.servers"},
	{"dns server by name", func(c *Config) { c.Delivery.DNS.Servers = []string{"dns.example:53"} }, "delivery.dns.servers[0]"},
	{"dns server without port", func(c *Config) { c.Delivery.DNS.Servers = []string{"127.0.0.1"} }, "delivery.dns.servers[0]"},
	{"dns server twice", func(c *Config) { c.Delivery.DNS.Servers = []string{"127.0.0.1:53", "[::1]:53", "127.0.0.1:53"} }, "delivery.dns.servers[2] 127.0.0.1:53 is listed twice"},
	{"delivery retry", func(c *Config) { c.Delivery.Retry.Jitter = 1 }, "delivery.retry"},
	{"pec timeouts", func(c *Config) { c.PEC.DeliveryTimeout = 0 }, "pec.delivery_timeout"},
	{"pec address", func(c *Config) { c.PEC.Accounts = []PECAccountConfig{{Address: "nobody"}} }, "pec.accounts[0].address"},
	{"pec account twice", func(c *Config) {
		a := PECAccountConfig{Address: "a@pec.example.it", SMTP: "smtps.pec.example.it:465", IMAP: "imaps.pec.example.it:993"}
		b := a
		b.Address = "A@PEC.example.it"
		c.PEC.Accounts = []PECAccountConfig{a, b}
	}, "pec account A@PEC.example.it"},
	{"pec endpoint", func(c *Config) {
		c.PEC.Accounts = []PECAccountConfig{{Address: "a@pec.example.it", SMTP: "smtps.pec.example.it:465"}}
	}, "imap"},
	{"pec receipt", func(c *Config) {
		c.PEC.Accounts = []PECAccountConfig{{Address: "a@pec.example.it", SMTP: "smtps.pec.example.it:465",
			IMAP: "imaps.pec.example.it:993", Receipt: "lunga"}}
	}, "receipt"},
	{"plugin without path", func(c *Config) { c.Plugins = []PluginConfig{DefaultPlugin("")} }, "plugins[0]"},
	{"plugin retry", func(c *Config) {
		p := DefaultPlugin("/bin/true")
		p.Retry.Max = Duration(time.Millisecond)
		c.Plugins = []PluginConfig{p}
	}, "retry.max"},
	{"submissions driver", func(c *Config) { c.Submissions = []SubmissionsConfig{{Driver: "oracle", DSN: "x"}} }, "submissions[0]: submissions driver"},
	{"submissions table", func(c *Config) {
		c.Submissions = []SubmissionsConfig{{Driver: "postgres", DSN: "x", Table: "Mail-Out"}}
	}, "submissions table \"Mail-Out\""},
	{"submissions without dsn", func(c *Config) { c.Submissions = []SubmissionsConfig{{Driver: "mysql"}} }, "submissions[0] needs exactly one of dsn"},
	{"submissions two dsns", func(c *Config) {
		c.Submissions = []SubmissionsConfig{{Driver: "postgres", DSN: "x"}, {Driver: "mysql", DSN: "x", DSNEnv: "APP_DSN"}}
	}, "submissions[1] needs exactly one of dsn"},
	{"submissions poll", func(c *Config) { c.Submissions = []SubmissionsConfig{{Driver: "mysql", DSN: "x", Poll: -1}} }, "submissions[0].poll"},
	{"submissions named alike", func(c *Config) {
		c.Submissions = []SubmissionsConfig{{Driver: "mysql", DSN: "a"}, {Driver: "mysql", DSN: "b"}}
	}, "submissions[0] and submissions[1] are both named \"mysql:postino_submissions\""},
	{"retention", func(c *Config) { c.Retention = 0 }, "retention"},
	{"dynamodb ttl within max age", func(c *Config) {
		c.Outbox.Backend = "dynamodb"
		c.Outbox.DynamoDB.TTL = c.Delivery.Retry.MaxAge
	}, "outbox.dynamodb.ttl"},
	{"log format", func(c *Config) { c.Log.Format = "xml" }, "log.format"},
}

func TestCheckErrors(t *testing.T) {
	for _, tt := range checkErrors {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			if err := c.Check(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to name %s", err, tt.want)
			}
		})
	}
}

func TestSecrets(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	os.WriteFile(pw, []byte("from-file\n"), 0o600)
	c := DefaultConfig()
	c.SMTP.Auth.Accounts = []Account{{Username: "a", PasswordFile: pw}, {Username: "b", PasswordEnv: "B_PW"}}
	got, err := c.accounts(func(k string) string { return map[string]string{"B_PW": "from-env"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	if got["a"] != "from-file" || got["b"] != "from-env" {
		t.Errorf("accounts %v", got)
	}
	c.SMTP.Auth.Accounts = []Account{{Username: "b", PasswordEnv: "UNSET"}}
	if _, err := c.accounts(func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "UNSET") {
		t.Errorf("unset variable: %v", err)
	}
}

func TestExampleConfig(t *testing.T) {
	c, err := LoadConfig(filepath.Join("..", "contrib", "postino.example.yaml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	def := DefaultConfig()
	if c.SMTP.Listen != def.SMTP.Listen || c.Retention != def.Retention || c.SMTP.MaxMessageSize != def.SMTP.MaxMessageSize {
		t.Errorf("the example's values drifted from the defaults: %+v", c)
	}
	if len(c.DKIM.Keys) == 0 {
		c.DKIM.Keys = nil // "keys: []" in the file
	}
	if !reflect.DeepEqual(c.DKIM, def.DKIM) {
		t.Errorf("the example's dkim section drifted from the defaults:\n%+v\n%+v", c.DKIM, def.DKIM)
	}
}
