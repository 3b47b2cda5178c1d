package relay

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestPrintIsEffective: what config print writes, loaded back, is the
// configuration serve runs with (Effective), and holds no zero that serve
// would replace by a default.
func TestPrintIsEffective(t *testing.T) {
	t.Setenv("EMAIL_OUTBOX_TABLE", "postino-outbox")
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:8000")
	full := `
data_dir: /srv/postino
routes:
  default:
    smarthost: ""
  senders:
    - match: {domain: example.org}
      smarthost: smtp.example.org:587
      tls: starttls
      username: app
      password_env: SMTP_PASSWORD
bounces:
  mailboxes:
    - host: 127.0.0.1
      tls: none
      username: bounces@example.com
      password_env: IMAP_PASSWORD
pec:
  accounts:
    - address: ufficio@pec.example.it
      password_env: PEC_PASSWORD
      smtp: smtps.pec.example.it:465
      imap: imaps.pec.example.it:993
plugins:
  - path: /usr/lib/postino/webhook
`
	for _, tt := range []struct {
		name, file string
	}{
		{"embedded default", ""},
		{"example", filepath.Join("..", "contrib", "postino.example.yaml")},
		{"routes, mailboxes, PEC, plugins", writeFile(t, full)},
		{"mysql", writeFile(t, "outbox:\n  backend: mysql\n  mysql:\n    dsn_env: POSTINO_TEST_DSN\n")},
		{"postgres", writeFile(t, "outbox:\n  backend: postgres\n  postgres:\n    dsn_env: POSTINO_TEST_DSN\nspool:\n  store: outbox\n")},
		{"dynamodb", writeFile(t, "outbox:\n  backend: dynamodb\nspool:\n  store: outbox\n")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := LoadConfig(tt.file, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := cfg.Check(); err != nil {
				t.Fatal(err)
			}
			printed, err := cfg.YAML()
			if err != nil {
				t.Fatal(err)
			}
			back, err := LoadConfig(writeFile(t, string(printed)), nil)
			if err != nil {
				t.Fatalf("the printed configuration does not load: %v\n%s", err, printed)
			}
			want := cfg.Effective(os.Getenv)
			emptyIsNil(reflect.ValueOf(&back).Elem())
			emptyIsNil(reflect.ValueOf(&want).Elem())
			if !reflect.DeepEqual(back, want) {
				t.Errorf("loaded back:\n%+v\nwant the effective configuration:\n%+v\nprinted:\n%s", back, want, printed)
			}
			if err := back.Check(); err != nil {
				t.Errorf("the printed configuration would not start: %v", err)
			}
			if z := defaultedZeros(back); len(z) > 0 {
				t.Errorf("printed as zero, where serve uses a default: %s\n%s", strings.Join(z, ", "), printed)
			}
			for _, want := range []string{"max_message_size: 25MiB", "max_line_length: 256KiB", "retention: 168h0m0s", "read_timeout: 5m0s"} {
				if !strings.Contains(string(printed), want) {
					t.Errorf("config print lacks %q:\n%s", want, printed)
				}
			}
		})
	}
}

// zeroMeansNone are the numbers whose zero is a setting of its own (no
// TTL, no expiry, no rate limit, no bound on tries), not a default.
var zeroMeansNone = []string{"outbox.dynamodb.ttl", "dkim.expiry", "routes.default.rate", "routes.senders[].rate",
	"plugins[].max_attempts", "suppression.hard_bounce.within", "suppression.hard_bounce.expires",
	"suppression.complaint.within", "suppression.complaint.expires"}

// defaultedStrings are the texts whose emptiness serve fills in.
var defaultedStrings = []string{"hostname", "routes.default.name", "routes.default.tls", "routes.senders[].name",
	"routes.senders[].tls", "bounces.mailboxes[].name", "bounces.mailboxes[].tls", "bounces.mailboxes[].folder",
	"bounces.mailboxes[].processed_folder", "bounces.mailboxes[].unmatched_folder", "pec.accounts[].username",
	"pec.accounts[].receipt", "pec.accounts[].folder", "pec.accounts[].processed_folder", "pec.accounts[].unmatched_folder",
	"plugins[].name"}

// defaultedZeros lists the settings of c, by their YAML path, that hold a
// zero serve would replace: numbers (and durations and sizes) but those of
// zeroMeansNone, and the defaultedStrings; the outbox settings of the
// backend in use only.
func defaultedZeros(c Config) []string {
	var out []string
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		switch v.Kind() {
		case reflect.Struct:
			for i := range v.NumField() {
				name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
				if name == "-" || !v.Type().Field(i).IsExported() {
					continue
				}
				walk(v.Field(i), strings.TrimPrefix(path+"."+name, "."))
			}
		case reflect.Slice:
			for i := range v.Len() {
				walk(v.Index(i), path+"[]")
			}
		case reflect.Int, reflect.Int64, reflect.Float64:
			if v.IsZero() && !slices.Contains(zeroMeansNone, path) {
				out = append(out, path)
			}
		case reflect.String:
			if v.IsZero() && slices.Contains(defaultedStrings, path) {
				out = append(out, path)
			}
		}
	}
	walk(reflect.ValueOf(c), "")
	var unused []string
	for _, b := range []string{"bolt", "mysql", "postgres", "dynamodb"} {
		if b != c.Outbox.Backend {
			unused = append(unused, "outbox."+b+".")
		}
	}
	if c.Spool.Store == SpoolOutbox {
		unused = append(unused, "spool.min_free_space")
	}
	return slices.DeleteFunc(out, func(p string) bool {
		return slices.ContainsFunc(unused, func(u string) bool { return strings.HasPrefix(p, u) })
	})
}

// emptyIsNil makes the empty lists and maps within v nil: YAML writes
// both as [] or {}.
func emptyIsNil(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				emptyIsNil(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			v.SetZero()
			return
		}
		if v.Kind() == reflect.Slice {
			for i := range v.Len() {
				emptyIsNil(v.Index(i))
			}
		}
	}
}

func TestByteSizeYAML(t *testing.T) {
	for _, tt := range []struct {
		size ByteSize
		text string
	}{{25 << 20, "25MiB"}, {256 << 10, "256KiB"}, {2 << 30, "2GiB"}, {500, "500"}, {1536, "1536"}, {0, "0"}, {39321600, "38400KiB"}} {
		b, err := yaml.Marshal(tt.size)
		if got := strings.TrimSpace(string(b)); err != nil || got != tt.text {
			t.Errorf("%d is written %q (%v), want %q", tt.size, got, err, tt.text)
		}
		var back ByteSize
		if err := yaml.Unmarshal(b, &back); err != nil || back != tt.size {
			t.Errorf("%q reads back as %d (%v), want %d", b, back, err, tt.size)
		}
	}
}
