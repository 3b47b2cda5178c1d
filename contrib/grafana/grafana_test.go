package grafana_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/relaytest"
)

// metricName finds the relay's series in PromQL and in Go sources.
var metricName = regexp.MustCompile(`postino_[a-z_]+`)

// TestDashboardMetricsExist keeps postino.json and the relay in step: every
// series a panel asks for is one the relay registers, and every series the
// relay registers has a panel.
func TestDashboardMetricsExist(t *testing.T) {
	used := dashboardMetrics(t)
	help := servedMetrics(t)
	source := sourceMetrics(t)
	if !help["postino_queue_messages"] {
		t.Errorf("/metrics has no postino_queue_messages; it has %v", sorted(help))
	}
	for name := range used {
		// Vectors with no observation yet are missing from /metrics, so the
		// names the sources register count too.
		if !help[name] && !source[name] {
			t.Errorf("postino.json uses %s, which the relay does not register", name)
		}
	}
	for name := range source {
		if !used[name] {
			t.Errorf("the relay registers %s, which no panel of postino.json shows", name)
		}
	}
}

// dashboardMetrics are the series named by the panels' (rows' included) and
// the variables' queries, histograms by their base name.
func dashboardMetrics(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile("postino.json")
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string
		Targets []struct{ Expr string }
		Panels  []json.RawMessage
	}
	var dash struct {
		SchemaVersion int
		Panels        []panel
		Templating    struct {
			List []struct {
				Name       string
				Definition string
			}
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("postino.json: %v", err)
	}
	if dash.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: panels and variables here need 36 or later", dash.SchemaVersion)
	}
	var exprs []string
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					t.Errorf("panel %q has a target without expr", p.Title)
				}
				exprs = append(exprs, tg.Expr)
			}
			var nested []panel
			for _, raw := range p.Panels {
				var np panel
				if err := json.Unmarshal(raw, &np); err != nil {
					t.Fatal(err)
				}
				nested = append(nested, np)
			}
			walk(nested)
		}
	}
	walk(dash.Panels)
	for _, v := range dash.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	used := map[string]bool{}
	for _, e := range exprs {
		for _, name := range metricName.FindAllString(e, -1) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				name = strings.TrimSuffix(name, suffix)
			}
			used[name] = true
		}
	}
	if len(used) == 0 {
		t.Fatal("postino.json names no postino_ series")
	}
	return used
}

// servedMetrics are the names of the # HELP lines of a real relay's /metrics.
func servedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	cfg := relay.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.SMTP.Listen = "127.0.0.1:0"
	cfg.Admin.Listen = "127.0.0.1:0"
	r, stop := relaytest.Start(t, cfg)
	defer stop()

	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + r.AdminAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "# HELP "); ok {
			name, _, _ := strings.Cut(rest, " ")
			names[name] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// sourceMetrics are the quoted postino_ names in the non-test Go sources of
// the packages that register the relay's series.
// notSeries are quoted postino_ names in the sources that name no series.
var notSeries = map[string]bool{
	"postino_submissions": true, // the submissions table (relay/submissions)
}

func sourceMetrics(t *testing.T) map[string]bool {
	t.Helper()
	quoted := regexp.MustCompile(`"(postino_[a-z_]+)"`)
	names := map[string]bool{}
	for _, dir := range []string{"../../relay", "../../plugins"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range quoted.FindAllSubmatch(src, -1) {
				if !notSeries[string(m[1])] {
					names[string(m[1])] = true
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(names) == 0 {
		t.Fatal("no postino_ series found in the sources")
	}
	return names
}

// TestManifestsAreYAML parses every document of the compose and Kubernetes
// examples.
func TestManifestsAreYAML(t *testing.T) {
	files := manifestFiles(t)
	for _, f := range files {
		docs := yamlDocs(t, f)
		if len(docs) == 0 {
			t.Errorf("%s holds no YAML document", f)
		}
	}
}

func manifestFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, dir := range []string{"../k8s", "../compose"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
				files = append(files, path)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(files) < 4 {
		t.Fatalf("expected compose.yaml, deployment.yaml, fleet.yaml and secret.example.yaml; found %v", files)
	}
	return files
}

// yamlDocs decodes each document of a file; empty documents are left out.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, len(docs)+1, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

// TestManifestSettings checks the POSTINO_* variables of the image, the
// compose services and the Kubernetes containers against the relay's own
// configuration loader, and the whole configuration of those that serve
// against its checks (as serve would at start).
func TestManifestSettings(t *testing.T) {
	image := dockerfileEnv(t, "../docker/Dockerfile")
	for _, want := range []string{"POSTINO_DATA", "POSTINO_LISTEN", "POSTINO_ADMIN"} {
		if image[want] == "" {
			t.Errorf("the Dockerfile sets no %s", want)
		}
	}
	checkEnv(t, "Dockerfile", image, false)

	compose := yamlDocs(t, "../compose/compose.yaml")[0]
	services, _ := compose["services"].(map[string]any)
	seen := 0
	for name, s := range services {
		svc, _ := s.(map[string]any)
		if img, _ := svc["image"].(string); !strings.HasPrefix(img, "postino") {
			continue
		}
		seen++
		env := merge(image, stringMap(t, svc["environment"]))
		_, custom := svc["entrypoint"]
		checkEnv(t, "compose service "+name, env, !custom)
	}
	if seen < 2 {
		t.Errorf("compose.yaml: found %d services on the postino image, want postino and migrate", seen)
	}

	// deployment.yaml: the relay alone; fleet.yaml: its migration too.
	for file, want := range map[string]int{"../k8s/deployment.yaml": 1, "../k8s/fleet.yaml": 2} {
		if seen := checkK8s(t, file, image); seen != want {
			t.Errorf("%s: found %d postino containers, want %d", file, seen, want)
		}
	}
}

// checkK8s checks the POSTINO_* variables of every postino container of the
// Deployments of file, and says how many it found.
func checkK8s(t *testing.T, file string, image map[string]string) int {
	t.Helper()
	seen := 0
	for _, doc := range yamlDocs(t, file) {
		if doc["kind"] != "Deployment" {
			continue
		}
		spec := dig(doc, "spec", "template", "spec")
		for _, list := range []string{"initContainers", "containers"} {
			cs, _ := spec[list].([]any)
			for _, c := range cs {
				ctr, _ := c.(map[string]any)
				if img, _ := ctr["image"].(string); !strings.Contains(img, "postino") {
					continue
				}
				seen++
				env := map[string]string{}
				items, _ := ctr["env"].([]any)
				for _, it := range items {
					kv, _ := it.(map[string]any)
					name, _ := kv["name"].(string)
					value, _ := kv["value"].(string)
					env[name] = value
				}
				_, cmd := ctr["command"]
				_, args := ctr["args"]
				checkEnv(t, file+" container "+ctr["name"].(string), merge(image, env), !cmd && !args)
			}
		}
	}
	return seen
}

// checkEnv loads each POSTINO_* variable alone, so that every unknown name
// or bad value is reported; then, for a container that runs serve, all of
// them with the files they name stood in for, and checks the result.
func checkEnv(t *testing.T, where string, env map[string]string, serves bool) {
	t.Helper()
	var all []string
	for _, name := range sorted(env) {
		if !strings.HasPrefix(name, "POSTINO_") {
			continue
		}
		kv := name + "=" + env[name]
		if _, err := relay.LoadConfig("", []string{kv}); err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		if strings.HasSuffix(name, "_FILE") {
			stand := filepath.Join(t.TempDir(), "secret")
			if err := os.WriteFile(stand, []byte(strings.Repeat("0123456789abcdef", 4)+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			kv = name + "=" + stand
		}
		all = append(all, kv)
	}
	if !serves {
		return
	}
	cfg, err := relay.LoadConfig("", all)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	if err := cfg.Check(); err != nil {
		t.Errorf("%s: serve would refuse to start: %v", where, err)
	}
}

// dockerfileEnv reads the ENV instructions (KEY=VALUE form) of a Dockerfile.
func dockerfileEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	for line := range strings.Lines(text) {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.EqualFold(fields[0], "ENV") {
			continue
		}
		for _, f := range fields[1:] {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				t.Fatalf("%s: write ENV as KEY=VALUE: %q", path, line)
			}
			env[k] = strings.Trim(v, `"`)
		}
	}
	return env
}

// stringMap reads a compose environment, as a map or as a KEY=VALUE list.
func stringMap(t *testing.T, v any) map[string]string {
	t.Helper()
	out := map[string]string{}
	switch e := v.(type) {
	case map[string]any:
		for k, val := range e {
			s, ok := val.(string)
			if !ok {
				t.Fatalf("compose environment %s: quote the value %v", k, val)
			}
			out[k] = s
		}
	case []any:
		for _, it := range e {
			k, val, _ := strings.Cut(it.(string), "=")
			out[k] = val
		}
	}
	return out
}

func merge(base, over map[string]string) map[string]string {
	out := maps.Clone(base)
	maps.Copy(out, over)
	return out
}

func dig(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		m, _ = m[k].(map[string]any)
	}
	return m
}

func sorted[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
