package relay

import (
	"encoding"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// envPrefix starts every variable the relay reads.
const envPrefix = "POSTINO_"

// envAliases are the short twins of the flags.
func envAliases() map[string]string {
	return map[string]string{
		"POSTINO_LISTEN": "smtp.listen",
		"POSTINO_ADMIN":  "admin.listen",
		"POSTINO_DATA":   "data_dir",
		// The twins of --smarthost and --smarthost-tls.
		"POSTINO_SMARTHOST":     "routes.default.smarthost",
		"POSTINO_SMARTHOST_TLS": "routes.default.tls",
		"POSTINO_BACKEND":       "outbox.backend",
	}
}

// envNotKeys are POSTINO_* variables that are not configuration keys.
func envNotKeys() []string {
	return []string{"POSTINO_CONFIG"}
}

// pluginVariables start the variables of the shipped plugins, which read
// them from the environment they inherit from the relay.
func pluginVariables() []string {
	return []string{"POSTINO_WEBHOOK_", "POSTINO_EXEC_"}
}

func isPluginVariable(name string) bool {
	for _, p := range pluginVariables() {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// setting is one configuration key.
type setting struct {
	key   string // smtp.listen
	env   string // POSTINO_SMTP_LISTEN
	value reflect.Value
}

// settings lists every key of cfg, leaves only: a list of accounts is one
// key, given in YAML or JSON when it comes from a variable.
func settings(cfg *Config) []setting {
	var out []setting
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		t := v.Type()
		for i := range t.NumField() {
			name := yamlName(t.Field(i))
			if name == "-" {
				continue
			}
			key := prefix + name
			fv := v.Field(i)
			if fv.Kind() == reflect.Struct && !isText(fv) {
				walk(fv, key+".")
				continue
			}
			out = append(out, setting{key: key, env: envName(key), value: fv})
		}
	}
	walk(reflect.ValueOf(cfg).Elem(), "")
	return out
}

// envName is the variable of the setting key: smtp.listen is
// POSTINO_SMTP_LISTEN.
func envName(key string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

func isText(v reflect.Value) bool {
	_, ok := v.Addr().Interface().(encoding.TextUnmarshaler)
	return ok
}

// applyEnv sets the keys named by POSTINO_* variables. A variable that is
// no setting is an error, so that a typo does not go unnoticed, but for
// those Kubernetes sets for a Service named postino, which it lists in
// cfg.ServiceLinks. Every variable at fault is reported.
func applyEnv(cfg *Config, env []string) error {
	byEnv := map[string]setting{}
	for _, s := range settings(cfg) {
		byEnv[s.env] = s
	}
	for alias, key := range envAliases() {
		for _, s := range settings(cfg) {
			if s.key == key {
				byEnv[alias] = s
			}
		}
	}
	var errs []error
	// Sorted, so that the outcome does not depend on the order of env: a
	// full name (POSTINO_SMTP_LISTEN) comes after its alias and wins.
	for _, kv := range slices.Sorted(slices.Values(env)) {
		name, val, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || slices.Contains(envNotKeys(), name) || isPluginVariable(name) {
			continue
		}
		s, ok := byEnv[name]
		switch {
		case ok:
			if err := setValue(s.value, s.key, val); err != nil {
				errs = append(errs, fmt.Errorf("environment variable %s (%s): %w", name, s.key, err))
			}
		case serviceLink(name, val):
			cfg.ServiceLinks = append(cfg.ServiceLinks, name)
		default:
			errs = append(errs, unknownVariable(name, slices.AppendSeq(envNotKeys(), maps.Keys(byEnv))))
		}
	}
	return errors.Join(errs...)
}

// unknownVariable says that name is no setting, and which one it may have
// meant.
func unknownVariable(name string, names []string) error {
	var keys []string
	for _, n := range names {
		keys = append(keys, strings.TrimPrefix(n, envPrefix))
	}
	if near, ok := closest(strings.TrimPrefix(name, envPrefix), keys); ok {
		return fmt.Errorf("environment variable %s is not a setting; did you mean %s?", name, envPrefix+near)
	}
	return fmt.Errorf("environment variable %s is not a setting: a setting's variable is POSTINO_ and its key in capitals "+
		"(smtp.max_recipients is POSTINO_SMTP_MAX_RECIPIENTS); postino config print, run without it, lists the keys", name)
}

// setValue sets the configuration field of key from the text of a variable
// or flag.
func setValue(v reflect.Value, key, text string) error {
	if u, ok := v.Addr().Interface().(encoding.TextUnmarshaler); ok {
		return u.UnmarshalText([]byte(text))
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(text)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not %s", text, kindName(v.Type()))
		}
		v.SetInt(n)
	case reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(text))
		if err != nil {
			return fmt.Errorf("%q is not %s", text, kindName(v.Type()))
		}
		v.SetBool(b)
	case reflect.Slice, reflect.Map:
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String {
			var items []string
			for _, it := range strings.Split(text, ",") {
				if it = strings.TrimSpace(it); it != "" {
					items = append(items, it)
				}
			}
			v.Set(reflect.ValueOf(items))
			return nil
		}
		// A list of records, or a map: YAML, or JSON, which YAML reads
		// too ({example.com: verify}); a field
		// that is no setting is an error, as in the file. Lines are told
		// when the text has several.
		return joinAt(decodeYAML([]byte(text), v.Addr().Interface(), key), func(line int) string {
			if line == 0 || !strings.Contains(strings.TrimSpace(text), "\n") {
				return ""
			}
			return "line " + strconv.Itoa(line)
		}, "; ")
	default:
		return fmt.Errorf("cannot set a %s from text", v.Kind())
	}
	return nil
}

// closest is the candidate nearest to s, and whether it is near enough to
// be what s meant: at most a quarter of s's letters off (one for a short
// name), a swap of two letters counting as one. Of candidates as near, the
// first in sorted order.
func closest(s string, candidates []string) (string, bool) {
	best, bestD := "", -1
	for _, c := range slices.Sorted(slices.Values(candidates)) {
		if d := editDistance(strings.ToLower(s), strings.ToLower(c)); bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	return best, bestD >= 0 && bestD <= max(1, len(s)/4)
}

// editDistance is the optimal string alignment distance: the insertions,
// deletions, substitutions and swaps of adjacent letters that make a into b.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
