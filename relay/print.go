package relay

import (
	"bytes"
	"maps"
	"os"
	"regexp"
	"slices"

	"github.com/go-sql-driver/mysql"
	"go.yaml.in/yaml/v3"
)

// masked stands for a secret in printed configuration.
const masked = "*****"

// secretName matches the names of plugin variables that hold secrets.
var secretName = regexp.MustCompile(`(?i)(secret|password|passwd|token|key|dsn|credential)`)

// YAML is the configuration as serve runs it (Effective), as a file would
// give it, every default included, with the secrets it holds itself masked: the passwords of the
// DSNs (outbox, submissions) and the plugin variables named like secrets. (Passwords and
// tokens given by file or variable are never in it, only where they are.)
// A URL among plugin variables or arguments has its password masked.
func (c Config) YAML() ([]byte, error) {
	c = c.Effective(os.Getenv)
	for _, s := range stores {
		if s.mask != nil {
			s.mask(&c.Outbox)
		}
	}
	c.Submissions = slices.Clone(c.Submissions)
	for i, s := range c.Submissions {
		switch {
		case s.DSN == "":
		case s.Driver == "mysql":
			c.Submissions[i].DSN = maskMySQLDSN(s.DSN)
		default:
			c.Submissions[i].DSN = keywordPassword.ReplaceAllString(maskURL(s.DSN), "${1}"+masked)
		}
	}
	c.Plugins = slices.Clone(c.Plugins)
	for i, p := range c.Plugins {
		p.Env = maps.Clone(p.Env)
		for k, v := range p.Env {
			if secretName.MatchString(k) {
				p.Env[k] = masked
			} else {
				p.Env[k] = maskURL(v)
			}
		}
		p.Args = slices.Clone(p.Args)
		for j, a := range p.Args {
			p.Args[j] = maskURL(a)
		}
		c.Plugins[i] = p
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// maskMySQLDSN masks the password of a MySQL DSN, or the whole DSN when
// it cannot be read.
func maskMySQLDSN(dsn string) string {
	d, err := mysql.ParseDSN(dsn)
	if err != nil {
		return masked
	}
	if d.Passwd != "" {
		d.Passwd = masked
	}
	return d.FormatDSN()
}

// keywordPassword is the password of a PostgreSQL DSN in keyword form
// (host=db password=secret).
var keywordPassword = regexp.MustCompile(`(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// urlPassword is the user:password@ part of a URL, wherever it is in a
// text (a value, or a --flag=URL argument).
var urlPassword = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^\s/:@]*):[^\s/@]*@`)

// pgPassword is the password of a PostgreSQL DSN in its key=value form
// (password=secret, or quoted), or among a URL's parameters.
var pgPassword = regexp.MustCompile(`(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)`)

// maskURL masks the passwords of the URLs in v.
func maskURL(v string) string {
	return urlPassword.ReplaceAllString(v, "${1}:"+masked+"@")
}
