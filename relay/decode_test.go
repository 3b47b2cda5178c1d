package relay

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConfigErrorsWhere: every problem of a configuration file is told with
// the file, its line and the key path; a syntax error with what is likely
// wrong at its line.
func TestConfigErrorsWhere(t *testing.T) {
	tests := []struct {
		name, file string
		want       []string // the lines of the error, after "config FILE "
	}{
		{"size", "smtp:\n  max_message_size: 10 megs\n",
			[]string{`line 2: smtp.max_message_size: size "10 megs": use bytes or a unit, such as 25MiB or 10MB`}},
		{"duration", "delivery:\n  retry:\n    max: 1h\n    first: 1 minute\n",
			[]string{`line 4: delivery.retry.first: duration "1 minute": use a number and a unit, such as 90s, 5m, 1h or 7d`}},
		{"days", "retention: 7 days\n",
			[]string{`line 1: retention: duration "7 days": use a number and a unit, such as 90s, 5m, 1h or 7d`}},
		{"every value at fault", "smtp:\n  max_recipients: many\n  auth:\n    allow_insecure: maybe\ndelivery:\n  retry:\n    jitter: some\n",
			[]string{`line 2: smtp.max_recipients: "many" is not a whole number`,
				`line 4: smtp.auth.allow_insecure: "maybe" is not true or false`,
				`line 7: delivery.retry.jitter: "some" is not a number`}},
		{"list item", "plugins:\n  - path: /bin/a\n  - path: /bin/b\n    timeout: soon\n",
			[]string{`line 4: plugins[1].timeout: duration "soon": use a number and a unit, such as 90s, 5m, 1h or 7d`}},
		{"map entry", "plugins:\n  - path: /bin/a\n    env:\n      A: [1]\n",
			[]string{`line 4: plugins[0].env.A: a list is not text`}},
		{"list for text", "smtp:\n  allow_networks: [10.0.0.0/8, {lan: x}]\n",
			[]string{`line 2: smtp.allow_networks[1]: a mapping is not text`}},
		{"text for a list", "dkim:\n  headers: From\n", []string{`line 2: dkim.headers: "From" is not a list`}},
		{"text for a section", "smtp: 5\n", []string{`line 1: smtp: "5" is not a mapping of settings`}},
		{"pointer", "dkim:\n  keys:\n    - {domain: example.com, selector: s1, key_file: /k, active: sometimes}\n",
			[]string{`line 3: dkim.keys[0].active: "sometimes" is not true or false`}},
		{"unknown key", "smtp:\n  listem: a\n", []string{"line 2: smtp.listem is not a setting; did you mean listen?"}},
		{"unknown key in a list", "dkim:\n  keys:\n    - domain: example.com\n      keyfile: /k\n",
			[]string{"line 4: dkim.keys[0].keyfile is not a setting; did you mean key_file?"}},
		{"unknown key near none", "log:\n  colour: true\n",
			[]string{"line 2: log.colour is not a setting; those of log are level, format"}},
		{"unknown top-level key", "frobnicate: a\n",
			[]string{"line 1: frobnicate is not a setting; the settings at the top are data_dir, hostname, smtp, admin"}},
		{"key twice", "smtp:\n  listen: 127.0.0.1:1\n  listen: 127.0.0.1:2\n",
			[]string{"line 3: smtp.listen is given twice, here and at line 2"}},
		{"tab", "smtp:\n\tlisten: x\n",
			[]string{"line 2: a tab indents this line, and YAML indents with spaces only (the YAML reader says: line 2: "}},
		{"tab after spaces", "smtp:\n  listen: x\n  \tmax_recipients: 3\n",
			[]string{"line 3: a tab indents this line, and YAML indents with spaces only"}},
		{"deeper under a value", "smtp:\n  listen: x\n   max_recipients: 3\n",
			[]string{"line 3: this line is indented deeper than line 2, whose key has its value already: indent it as line 2, " +
				"or leave line 2's value out to make it a section (the YAML reader says: line 3: mapping values are not allowed in this context)"}},
		{"back to no column", "smtp:\n    listen: x\n  max_recipients: 3\n",
			[]string{"line 3: this line is indented by 2 spaces, and the lines above it by 0 or 4 spaces: " +
				"the keys of one section start in one column (the YAML reader says: line 2: did not find expected key)"}},
		{"list item astray", "smtp:\n  auth:\n    accounts:\n    - username: a\n      password_env: A\n     - username: b\n",
			[]string{"line 6: this line is indented by 5 spaces, and the lines above it by 0, 2, 4 or 6 spaces"}},
		{"no colon", "smtp:\n  listen 127.0.0.1:2525\n  max_recipients: 3\n",
			[]string{"line 2: this line has no colon after its key: a setting is written key: value"}},
		{"bracket never closed", "smtp:\n  listen: x\n  allow_networks: [10.0.0.0/8,\n    192.168.0.0/16\n",
			[]string{"line 3: this line opens a [ or { that is never closed"}},
		{"not a mapping", "hello\n", []string{`line 1: the configuration: "hello" is not a mapping of settings`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, tt.file)
			_, err := LoadConfig(path, nil)
			if err == nil {
				t.Fatal("loaded")
			}
			got := strings.Split(err.Error(), "\n")
			if len(got) != len(tt.want) {
				t.Fatalf("%d errors, want %d:\n%v", len(got), len(tt.want), err)
			}
			for i, want := range tt.want {
				if !strings.HasPrefix(got[i], "config "+path+" "+want) {
					t.Errorf("error\n%s\nwant it to start\nconfig %s %s", got[i], path, want)
				}
			}
		})
	}
}

// TestConfigDecodes: what yaml decoded before still decodes:
// anchors and merge keys, JSON, flow lists over several lines, YAML 1.1
// booleans, empty sections and values.
func TestConfigDecodes(t *testing.T) {
	file := writeFile(t, `
routes:
  senders:
    - &billing
      name: billing
      match: {sender: billing@example.com}
      smarthost: smtp.example.com:465
      tls: tls
      max_connections: 3
    - <<: *billing
      name: shop
      match: {sender: shop@example.com}
dkim:
  headers: [From, Sender,
            Subject]   # a list over two lines
  keys:
    - {domain: example.com, selector: s1, key_file: /k/s1, active: no}
smtp:
  auth:
    allow_insecure: yes
admin:
log:
  level:
plugins:
  - path: /bin/hook
    env: {A: "1", B: two}
retention: 3d
`)
	c, err := LoadConfig(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := c.Routes.Senders
	if len(s) != 2 || s[1].Name != "shop" || s[1].Smarthost != "smtp.example.com:465" || s[1].MaxConnections != 3 ||
		s[1].Match.Sender != "shop@example.com" || s[0].Match.Sender != "billing@example.com" {
		t.Errorf("senders %+v", s)
	}
	if strings.Join(c.DKIM.Headers, ",") != "From,Sender,Subject" || len(c.DKIM.Keys) != 1 || c.DKIM.Keys[0].Active == nil || *c.DKIM.Keys[0].Active {
		t.Errorf("dkim %+v", c.DKIM)
	}
	if !c.SMTP.Auth.AllowInsecure || c.Admin.Listen != "127.0.0.1:8525" || c.Log.Level != "info" || c.Retention.D() != 72*time.Hour {
		t.Errorf("allow_insecure %v, admin %+v, log %+v, retention %s", c.SMTP.Auth.AllowInsecure, c.Admin, c.Log, c.Retention.D())
	}
	if p := c.Plugins; len(p) != 1 || p[0].Env["A"] != "1" || p[0].Env["B"] != "two" {
		t.Errorf("plugins %+v", p)
	}
	json := filepath.Join(t.TempDir(), "postino.json")
	os.WriteFile(json, []byte(`{"smtp": {"max_recipients": 9}, "retention": "2d"}`), 0o600)
	if c, err := LoadConfig(json, nil); err != nil || c.SMTP.MaxRecipients != 9 || c.Retention.D() != 48*time.Hour {
		t.Errorf("JSON: %v %+v", err, c.SMTP)
	}
}

// TestVariableErrorsWhere: a value from a POSTINO_* variable names the
// variable and the key; a list given in one names the item's key.
func TestVariableErrorsWhere(t *testing.T) {
	for _, tt := range []struct {
		env, want string
	}{
		{"POSTINO_DELIVERY_RETRY_FIRST=1 minute", `environment variable POSTINO_DELIVERY_RETRY_FIRST (delivery.retry.first): duration "1 minute": use a number and a unit`},
		{"POSTINO_SMTP_MAX_RECIPIENTS=many", `environment variable POSTINO_SMTP_MAX_RECIPIENTS (smtp.max_recipients): "many" is not a whole number`},
		{`POSTINO_PLUGINS=[{"path": "/bin/a", "timeout": "soon", "retyr": {}}]`,
			`environment variable POSTINO_PLUGINS (plugins): plugins[0].timeout: duration "soon": use a number and a unit, such as 90s, 5m, 1h or 7d; ` +
				`plugins[0].retyr is not a setting; did you mean retry?`},
		{"POSTINO_DKIM_KEYS=- domain: example.com\n  selector: 5\n  keyfile: /k\n",
			`environment variable POSTINO_DKIM_KEYS (dkim.keys): line 3: dkim.keys[0].keyfile is not a setting; did you mean key_file?`},
	} {
		_, err := LoadConfig("", []string{tt.env})
		if err == nil || err.Error() != tt.want && !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s:\n%v\nwant\n%s", tt.env, err, tt.want)
		}
	}
}
