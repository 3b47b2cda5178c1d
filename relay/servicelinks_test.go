package relay

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// podEnv is the environment Kubernetes gives a pod of a namespace with
// Services named postino, postino-admin and postino-v6.
func podEnv(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "servicelinks.env"))
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			env = append(env, l)
		}
	}
	return env
}

func TestServiceLink(t *testing.T) {
	for _, kv := range podEnv(t) {
		name, value, _ := strings.Cut(kv, "=")
		if want := strings.HasPrefix(name, "POSTINO_"); serviceLink(name, value) != want {
			t.Errorf("serviceLink(%s) = %v", kv, !want)
		}
	}
	// The shape is Kubernetes' own, names and values: anything else is
	// a mistake to report.
	for _, kv := range []string{
		"POSTINO_PORT=2525",                           // a port given by hand, not a link
		"POSTINO_SERVICE_HOST=postino.default.svc",    // not an address
		"POSTINO_SERVICE_PORT=02525",                  // not as Kubernetes writes it
		"POSTINO_SERVICE_PORT=70000",                  // no port
		"POSTINO_SERVICE_PORT_=2525",                  // no port name
		"POSTINO_PORT_2525_TCP=tcp://10.96.0.12:25",   // another port than its name
		"POSTINO_PORT_2525_TCP=udp://10.96.0.12:2525", // another protocol than its name
		"POSTINO_PORT_2525_HTTP=tcp://10.96.0.12:2525",
		"POSTINO_PORT_2525_TCP_PROTO=udp",
		"POSTINO_PORT_2525_TCP_PORT=25",
		"POSTINO_PORT_2525_TCP_ADDR=localhost",
		"POSTINO_PORT_2525_TCP_HOST=10.96.0.12",
		"POSTINO_PORT=http://10.96.0.12:2525",
		"POSTINO_SMTP_LISTEN=0.0.0.0:2525",
		"POSTINO_SERVICE_HOSTS=10.96.0.12",
		"POSTINO__SERVICE_HOST=10.96.0.12",
	} {
		name, value, _ := strings.Cut(kv, "=")
		if serviceLink(name, value) {
			t.Errorf("serviceLink(%s) = true", kv)
		}
	}
}

// TestServiceLinksIgnored: the service-link variables of a pod start the
// relay, listed in ServiceLinks; the settings among them still apply, and a
// typo beside them still stops it.
func TestServiceLinksIgnored(t *testing.T) {
	env := append(podEnv(t), "POSTINO_LISTEN=127.0.0.1:2600", "POSTINO_SMTP_MAX_RECIPIENTS=7")
	c, err := LoadConfig("", env)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, kv := range podEnv(t) {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "POSTINO_") {
			want = append(want, name)
		}
	}
	slices.Sort(want)
	if !slices.Equal(c.ServiceLinks, want) {
		t.Errorf("ServiceLinks\n%v\nwant\n%v", c.ServiceLinks, want)
	}
	if c.SMTP.Listen != "127.0.0.1:2600" || c.SMTP.MaxRecipients != 7 {
		t.Errorf("the settings beside them: listen %s, max_recipients %d", c.SMTP.Listen, c.SMTP.MaxRecipients)
	}
	_, err = LoadConfig("", append(env, "POSTINO_SMTP_MAX_RECIPEINTS=7"))
	if err == nil || !strings.Contains(err.Error(), "POSTINO_SMTP_MAX_RECIPEINTS is not a setting; did you mean POSTINO_SMTP_MAX_RECIPIENTS?") {
		t.Errorf("a typo among the links: %v", err)
	}
	if err != nil && strings.Contains(err.Error(), "POSTINO_PORT") {
		t.Errorf("the error names a link: %v", err)
	}
}

// TestClosest: a suggestion is offered only when it is near.
func TestClosest(t *testing.T) {
	keys := []string{"listen", "max_message_size", "max_recipients", "tls", "auth", "smtp"}
	for _, tt := range []struct {
		s, want string // want "": no suggestion
	}{
		{"listem", "listen"},
		{"lisetn", "listen"},
		{"smpt", "smtp"},
		{"tsl", "tls"},
		{"max_recipeints", "max_recipients"},
		{"max_recpients", "max_recipients"},
		{"port", ""},
		{"hostname", ""},
		{"max_size", ""},
	} {
		got, ok := closest(tt.s, keys)
		if !ok {
			got = ""
		}
		if got != tt.want {
			t.Errorf("closest(%s) = %q, %v; want %q", tt.s, got, ok, tt.want)
		}
	}
}
