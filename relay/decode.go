package relay

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// lineError is a problem of a configuration text, at a line of it (0:
// nowhere in particular).
type lineError struct {
	line int
	err  error
}

// joinAt is errs as one error, each told after where(its line), when that
// says something.
func joinAt(errs []lineError, where func(line int) string, sep string) error {
	var msgs []string
	for _, e := range errs {
		if w := where(e.line); w != "" {
			msgs = append(msgs, w+": "+e.err.Error())
		} else {
			msgs = append(msgs, e.err.Error())
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return errors.New(strings.Join(msgs, sep))
}

// decodeYAML reads YAML (or JSON, which YAML reads too) into v, the value
// of the setting at key ("" for the whole configuration); empty text sets
// nothing. The text is read into a yaml.Node first, then each of its
// values into its setting, so that every problem is told with its line and
// its key: a key that is no setting, a value its setting cannot take, a key
// given twice. A syntax error stops the reading, told with what likely
// caused it.
func decodeYAML(text []byte, v any, key string) []lineError {
	var doc yaml.Node
	if err := yaml.Unmarshal(text, &doc); err != nil {
		return []lineError{syntaxError(string(text), err)}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil
	}
	var d decoder
	d.value(doc.Content[0], reflect.ValueOf(v).Elem(), key)
	return d.errs
}

// decoder decodes the nodes of a configuration into its settings,
// keeping every problem it meets.
type decoder struct {
	errs []lineError
}

func (d *decoder) fail(n *yaml.Node, format string, args ...any) {
	d.errs = append(d.errs, lineError{n.Line, fmt.Errorf(format, args...)})
}

// value decodes n into v, the setting at key.
func (d *decoder) value(n *yaml.Node, v reflect.Value, key string) {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	switch {
	case v.Kind() == reflect.Struct && !isText(v):
		// A section left empty keeps its defaults, as yaml does.
		if !isNull(n) {
			d.mapping(n, v, key)
		}
	case v.Kind() == reflect.Slice:
		d.list(n, v, key)
	case v.Kind() == reflect.Map:
		d.dict(n, v, key)
	default:
		if err := n.Decode(v.Addr().Interface()); err != nil {
			d.fail(n, "%s: %w", keyName(key), valueError(n, v.Type(), err))
		}
	}
}

// mapping decodes the keys of n into the fields of the struct v.
func (d *decoder) mapping(n *yaml.Node, v reflect.Value, key string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, "%s: %s is not a mapping of settings", keyName(key), describe(n))
		return
	}
	names, index := yamlFields(v.Type())
	// Merged mappings (<<: *anchor) first: the keys given here win.
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].ShortTag() == "!!merge" {
			for _, m := range merged(n.Content[i+1]) {
				d.mapping(m, v, key)
			}
		}
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.ShortTag() == "!!merge" {
			continue
		}
		sub := join(key, k.Value)
		if !d.once(seen, k, sub) {
			continue
		}
		f, ok := index[k.Value]
		if !ok {
			d.errs = append(d.errs, lineError{k.Line, unknownKey(sub, k.Value, key, names)})
			continue
		}
		d.value(val, v.Field(f), sub)
	}
}

// merged are the mappings a merge key (<<) names: one, or a list.
func merged(n *yaml.Node) []*yaml.Node {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.SequenceNode {
		return []*yaml.Node{n}
	}
	var out []*yaml.Node
	for _, m := range n.Content {
		out = append(out, merged(m)...)
	}
	return out
}

// list decodes the items of n into the slice v.
func (d *decoder) list(n *yaml.Node, v reflect.Value, key string) {
	if !d.collection(n, yaml.SequenceNode, v, key) {
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		d.value(item, s.Index(i), fmt.Sprintf("%s[%d]", key, i))
	}
	v.Set(s)
}

// dict decodes the keys of n into the map v (a plugin's variables).
func (d *decoder) dict(n *yaml.Node, v reflect.Value, key string) {
	if !d.collection(n, yaml.MappingNode, v, key) {
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		sub := join(key, k.Value)
		if !d.once(seen, k, sub) {
			continue
		}
		elem := reflect.New(v.Type().Elem()).Elem()
		d.value(val, elem, sub)
		m.SetMapIndex(reflect.ValueOf(k.Value).Convert(v.Type().Key()), elem)
	}
	v.Set(m)
}

// collection reports whether n is a collection of kind, to decode into
// v; null empties v, as yaml does.
func (d *decoder) collection(n *yaml.Node, kind yaml.Kind, v reflect.Value, key string) bool {
	if isNull(n) {
		v.SetZero()
		return false
	}
	if n.Kind != kind {
		d.fail(n, "%s: %s is not %s", keyName(key), describe(n), kindName(v.Type()))
		return false
	}
	return true
}

// once reports whether key k, the setting at path, is the first of its
// name among those seen (name to line) in its mapping.
func (d *decoder) once(seen map[string]int, k *yaml.Node, path string) bool {
	if first, dup := seen[k.Value]; dup {
		d.fail(k, "%s is given twice, here and at line %d", path, first)
		return false
	}
	seen[k.Value] = k.Line
	return true
}

// yamlName is the key of a field in the configuration; "-" for none.
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

// yamlFields are the keys of a section, in order, and their fields.
func yamlFields(t reflect.Type) ([]string, map[string]int) {
	var names []string
	index := map[string]int{}
	for i := range t.NumField() {
		if name := yamlName(t.Field(i)); name != "-" {
			names = append(names, name)
			index[name] = i
		}
	}
	return names, index
}

// unknownKey says that path is no setting of section, which has names,
// and which one it may have meant.
func unknownKey(path, name, section string, names []string) error {
	if near, ok := closest(name, names); ok {
		return fmt.Errorf("%s is not a setting; did you mean %s?", path, near)
	}
	if section == "" {
		return fmt.Errorf("%s is not a setting; the settings at the top are %s", path, strings.Join(names, ", "))
	}
	return fmt.Errorf("%s is not a setting; those of %s are %s", path, section, strings.Join(names, ", "))
}

func join(key, name string) string {
	if key == "" {
		return name
	}
	return key + "." + name
}

func keyName(key string) string {
	if key == "" {
		return "the configuration"
	}
	return key
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names what n holds, for an error.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

// valueError says why the value of n does not fit a setting of type t:
// the setting's own words (a duration, a size), or what it takes.
func valueError(n *yaml.Node, t reflect.Type, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	return fmt.Errorf("%s is not %s", describe(n), kindName(t))
}

// kindName says what a setting of type t takes.
func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return kindName(t.Elem())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return "text"
}

// yamlSyntax is the YAML reader's syntax error: its line and its words.
var yamlSyntax = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError tells a syntax error of text: at the line where it likely
// is, with what is likely wrong there, and the YAML reader's own words.
func syntaxError(text string, err error) lineError {
	msg, line := strings.TrimPrefix(err.Error(), "yaml: "), 0
	if m := yamlSyntax.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
	}
	if at, hint := indentHint(text, line); at > 0 {
		return lineError{at, fmt.Errorf("%s (the YAML reader says: %s)", hint, msg)}
	}
	if m := yamlSyntax.FindStringSubmatch(err.Error()); m != nil {
		msg = m[2]
	}
	return lineError{line, fmt.Errorf("not YAML: %s", msg)}
}
