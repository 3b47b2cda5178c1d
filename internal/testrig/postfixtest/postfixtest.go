// Package postfixtest runs a private, throw-away Postfix instance (Debian's
// postfix) on loopback for one test, so that what Postino sends meets the
// MTA it meets in production, and what that MTA sends back (a DSN) is the
// real thing.
//
// The instance has a configuration directory of its own under the test's
// temporary directory (postfix -c DIR), with its own queue, data directory
// and log file; /etc/postfix is read for nothing but the metadata files
// copied from it (postfix-files, dynamicmaps.cf), and the system's Postfix,
// if one runs, is left alone.
package postfixtest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"
)

// Server is a running Postfix for one test.
type Server struct {
	// Addr is where its smtpd listens, 127.0.0.1:port.
	Addr string
	// Dir is the configuration directory; Dir/queue its queue.
	Dir string

	logFile string
}

// Options choose where Postfix delivers.
type Options struct {
	// Local is the domain Postfix takes as its own (mydestination): every
	// recipient of it is accepted at RCPT (no recipient check), and
	// local(8) bounces the ones without a system account, as a server
	// that checks only after it took the mail does.
	Local string
	// LMTP maps domains to the LMTP servers (host:port) their mail is
	// delivered to: the bounces' mailbox, say.
	LMTP map[string]string
	// Addr is where smtpd listens, a loopback host:port (127.0.0.3:2525,
	// an MX host among others on one port); a free port of 127.0.0.1 when
	// empty.
	Addr string
}

// Start runs Postfix and returns once its smtpd greets. It is stopped at
// the end of the test. Postfix starts as root only; without it, or
// without root, the test is skipped, or fails when CI=true.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	if _, err := os.Stat(postfixBin); err != nil {
		missing(t, "postfix is missing: apt-get install -y postfix")
	}
	if os.Geteuid() != 0 {
		missing(t, "postfixtest needs root: Postfix's master starts as root")
	}
	owner, err := user.Lookup("postfix")
	if err != nil {
		t.Fatalf("postfixtest needs the postfix user, which Debian's package makes: %v", err)
	}
	dir := t.TempDir()
	s := &Server{Dir: dir, logFile: filepath.Join(dir, "maillog")}
	// Postfix's daemons run as the postfix user and chdir to the queue:
	// they must be able to walk down to it, but the testing package makes
	// the test's temporary directory 0700. Open it for traversal only.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"queue", "data"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The data directory (master.lock, caches) must be the postfix user's;
	// postfix start makes the queue's own directories.
	uid, _ := strconv.Atoi(owner.Uid)
	if err := os.Chown(filepath.Join(dir, "data"), uid, -1); err != nil {
		t.Fatal(err)
	}
	copyMeta(t, dir)

	// The port is picked free and handed to Postfix, which binds it a
	// moment later; another process may take it in between, so a start
	// that fails on a taken port is retried with another.
	for range 5 {
		s.Addr = o.Addr
		if s.Addr == "" {
			s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
		}
		s.writeConfig(t, o)
		if err = s.start(); o.Addr != "" || err == nil || !strings.Contains(err.Error(), "Address already in use") {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Error(err)
		}
	})
	return s
}

const postfixBin = "/usr/sbin/postfix"

// missing skips the test for want of a package or of root, or fails it
// when CI=true.
func missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (make test installs it through .ci/deps, and runs as root)", msg)
	}
	t.Skip(msg)
}

// copyMeta copies the files of meta_directory, which say what an instance
// is made of and which map types it has, so that the instance needs
// nothing of /etc/postfix once started.
func copyMeta(t testing.TB, dir string) {
	t.Helper()
	for _, name := range []string{"postfix-files", "dynamicmaps.cf"} {
		b, err := os.ReadFile(filepath.Join("/etc/postfix", name))
		if err != nil {
			t.Fatalf("Postfix's metadata: %v", err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		// The .d directories hold the files of the map types packaged
		// apart (postfix-mysql, ...); none is needed, so they stay empty.
		if err := os.Mkdir(filepath.Join(dir, name+".d"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type config struct {
	Dir, Addr, Host, Local, Transports string
}

// mainTemplate is a complete main.cf: nothing is read from /etc/postfix,
// no name is looked up in DNS, and only loopback clients may relay.
var mainTemplate = template.Must(template.New("main.cf").Parse(`# Written by postfixtest for one test.
compatibility_level = 3.6
queue_directory = {{.Dir}}/queue
data_directory = {{.Dir}}/data
meta_directory = {{.Dir}}
myhostname = mx.postfix.test
mydomain = postfix.test
myorigin = $myhostname
mydestination = {{.Local}}
inet_interfaces = {{.Host}}
inet_protocols = ipv4
mynetworks = 127.0.0.0/8
smtpd_relay_restrictions = permit_mynetworks, reject_unauth_destination
# No recipient check at RCPT: local(8) bounces an unknown user after the
# mail was taken, and the sender gets a DSN.
local_recipient_maps =
alias_maps =
alias_database =
biff = no
smtp_dns_support_level = disabled
{{- if .Transports}}
transport_maps = inline:{ {{.Transports}} }
{{- end}}
# Its own log file, through postlogd, rather than the system's syslog.
maillog_file = {{.Dir}}/maillog
maillog_file_prefixes = {{.Dir}}
`))

// masterTemplate is Debian's master.cf without chroot (the instance's
// directories are not laid out for one) and with smtpd on Addr only.
var masterTemplate = template.Must(template.New("master.cf").Parse(`# Written by postfixtest for one test.
{{.Addr}} inet n - n - - smtpd
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
smtp      unix  -       -       n       -       -       smtp
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
local     unix  -       n       n       -       -       local
lmtp      unix  -       -       n       -       -       lmtp
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
`))

func (s *Server) writeConfig(t testing.TB, o Options) {
	t.Helper()
	var transports []string
	for domain, addr := range o.LMTP {
		transports = append(transports, domain+"=lmtp:inet:"+addr)
	}
	// Postfix binds only addresses an interface has (inet_interfaces):
	// the rest of 127/8 reaches lo without being one of its addresses, so
	// it is allowed all, and master.cf binds Addr alone.
	host, _, _ := net.SplitHostPort(s.Addr)
	if host != "127.0.0.1" {
		host = "all"
	}
	c := config{Dir: s.Dir, Addr: s.Addr, Host: host, Local: o.Local, Transports: strings.Join(transports, ", ")}
	for name, tmpl := range map[string]*template.Template{"main.cf": mainTemplate, "master.cf": masterTemplate} {
		f, err := os.Create(filepath.Join(s.Dir, name))
		if err != nil {
			t.Fatal(err)
		}
		err = tmpl.Execute(f, c)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// startTimeout bounds how long Postfix may take to greet; its start
// script's checks take a second or two.
const startTimeout = 60 * time.Second

// start runs postfix start, which returns once the master has started,
// and waits for smtpd's greeting. If it does not come, the error carries
// Postfix's log.
func (s *Server) start() error {
	os.Truncate(s.logFile, 0)
	if out, err := exec.Command(postfixBin, "-c", s.Dir, "start").CombinedOutput(); err != nil {
		s.stop()
		return fmt.Errorf("postfix -c %s start: %v\n%s\n%s", s.Dir, err, out, s.Log())
	}
	deadline := time.Now().Add(startTimeout)
	for {
		err := greeted(s.Addr)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("postfix did not greet on %s within %v (last: %v):\n%s", s.Addr, startTimeout, err, s.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// greeted says whether an SMTP greeting comes from addr.
func greeted(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "220 ") {
		return fmt.Errorf("greeting %q", line)
	}
	return nil
}

// stop ends Postfix and waits until its master is gone: postfix stop
// only signals it. Stopping a stopped server does nothing.
func (s *Server) stop() error {
	pid := s.masterPID()
	if pid == 0 {
		return nil
	}
	if out, err := exec.Command(postfixBin, "-c", s.Dir, "stop").CombinedOutput(); err != nil {
		return fmt.Errorf("postfix -c %s stop: %v\n%s", s.Dir, err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			return fmt.Errorf("postfix's master (pid %d) did not stop within 30s; killed", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// masterPID is the running master's pid, from its pid file; 0 when none.
func (s *Server) masterPID() int {
	b, err := os.ReadFile(filepath.Join(s.Dir, "queue", "pid", "master.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return 0
	}
	return pid
}

// Log returns what Postfix has logged so far.
func (s *Server) Log() string {
	b, err := os.ReadFile(s.logFile)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

// Deliveries returns the log lines of Postfix's delivery attempts to rcpt
// (to=<rcpt>, whatever their status): a message Postfix never took has
// none.
func (s *Server) Deliveries(rcpt string) []string {
	var out []string
	for _, l := range strings.Split(s.Log(), "\n") {
		if strings.Contains(l, " to=<"+rcpt+">") {
			out = append(out, l)
		}
	}
	return out
}
