// Package dovecottest runs a real, throw-away Dovecot IMAP server (Debian's
// dovecot-imapd) on loopback for one test, so that IMAP clients are tested
// against the server they meet in production rather than against a fake.
//
// Everything the server reads and writes (configuration, passwd-file, mail,
// sockets, pid file, state, log) lives under the test's temporary directory;
// /etc/dovecot and /var/lib/dovecot are never read or written, and tests
// running in parallel each get their own server on their own ports.
//
// The server is Dovecot 2.3 as shipped by Debian 12 with its default
// Maildir++ layout, so the hierarchy separator is "." (a folder
// "Bounces.Done" is a child of "Bounces").
package dovecottest

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"

	"github.com/genropy/postino/internal/testrig/testcert"
)

// Server is a running Dovecot for one test. Its helpers (Append, Messages,
// ...) each log in on a connection of their own, so they can be used while
// the code under test holds its sessions. Restart must not overlap them.
type Server struct {
	Addr     string // 127.0.0.1:port, plain IMAP (STARTTLS offered when TLS is on)
	TLSAddr  string // 127.0.0.1:port, implicit TLS (IMAPS), empty unless Options.TLS
	LMTPAddr string // 127.0.0.1:port, LMTP delivering to User, empty unless Options.LMTP
	User     string
	Password string
	CAFile   string // PEM of the CA that signed the server certificate, when TLS

	// Dir holds the configuration, the log and the mail (Dir/mail is the
	// user's Maildir++ home).
	Dir string

	conf    string // dovecot.conf
	logFile string // Dovecot's own log, with the master's stdout and stderr
	baseDir string // Dovecot's sockets and pid file
	bin     string // the dovecot binary
	tls     *tls.Config
	proc    *process
}

// Options choose what Start serves.
type Options struct {
	// TLS also serves IMAPS on TLSAddr and offers STARTTLS on Addr, with a
	// certificate for 127.0.0.1 and localhost signed by the CA in CAFile.
	TLS bool
	// LMTP also serves LMTP on LMTPAddr (dovecot-lmtpd), delivering to
	// User's INBOX, so that a real MTA can deliver into the mailbox.
	LMTP bool
}

// Message is one message of a folder as the server stores it.
type Message struct {
	UID   uint32
	Flags []string // as IMAP names them (\Seen, \Deleted, keywords), without \Recent
	Raw   []byte   // the whole message, header and body
}

// Header returns the first value of the named header field of m, or "" if
// m has none or does not parse.
func (m Message) Header(name string) string {
	msg, err := mail.ReadMessage(bytes.NewReader(m.Raw))
	if err != nil {
		return ""
	}
	return msg.Header.Get(name)
}

// The mail processes must not run as root: Dovecot refuses a userdb UID of
// 0 whatever first_valid_uid says. As root we use nobody, which every
// Debian system has; as any other user Dovecot can only run as that user.
const mailUser = "nobody"

// Start runs Dovecot with one user and an empty INBOX and returns once it
// answers with an IMAP greeting. The server is stopped at the end of the
// test. Without Dovecot the test is skipped, or fails when CI=true.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin := findDovecot(t, o)
	dir := t.TempDir()
	s := &Server{
		User:     "bounces@example.test",
		Password: "imap-test-password",
		Dir:      dir,
		conf:     filepath.Join(dir, "dovecot.conf"),
		logFile:  filepath.Join(dir, "dovecot.log"),
		bin:      bin,
	}
	s.baseDir = baseDir(t, dir)
	c := config{
		BaseDir:  s.baseDir,
		StateDir: filepath.Join(dir, "state"),
		Log:      s.logFile,
		Passwd:   filepath.Join(dir, "passwd"),
		Home:     filepath.Join(dir, "mail"),
	}
	id := processIDs(t)
	c.UID, c.GID, c.Unprivileged, c.RunAs, c.RunAsGroup = id.uid, id.gid, id.unprivileged, id.name, id.group

	// Dovecot's auth process reads the passwd-file as the dovecot user and
	// the mail processes run as nobody: both must be able to walk down to
	// their files, but the testing package makes the test's temporary
	// directory 0700. Open it for traversal only, not for listing.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{c.StateDir, c.Home} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if id.chown {
		if err := os.Chown(c.Home, id.uidN, id.gidN); err != nil {
			t.Fatal(err)
		}
	}
	// The password is a test fixture, {PLAIN} so that it needs no hashing;
	// the file must be readable by the dovecot user that runs the auth
	// process.
	if err := os.WriteFile(c.Passwd, []byte(s.User+":{PLAIN}"+s.Password+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	if o.TLS {
		p := testcert.New(t)
		// The config process reads the "<file" values as root before any
		// privilege is dropped, so the 0600 files testcert writes will do.
		c.Cert, c.Key = p.CertFile, p.KeyFile
		s.CAFile = p.CAFile
		s.tls = p.ClientConfig()
	}

	// Ports are picked free and handed to Dovecot, which binds them a
	// moment later; another process may take one in between, so a start
	// that fails on a taken port is retried with new ones.
	var err error
	for range 5 {
		ports := freePorts(t, 3)
		c.Port = ports[0]
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port))
		if o.TLS {
			c.TLSPort = ports[1]
			s.TLSAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(c.TLSPort))
		}
		if o.LMTP {
			c.LMTPPort = ports[2]
			s.LMTPAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(c.LMTPPort))
		}
		writeConfig(t, s.conf, c)
		if err = s.run(); err == nil || !strings.Contains(err.Error(), "Address already in use") {
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

// findDovecot returns the dovecot binary. It lives in /usr/sbin, which is
// not on every user's PATH. LMTP is served by another package, whose
// binary the master runs.
func findDovecot(t testing.TB, o Options) string {
	t.Helper()
	bin, err := exec.LookPath("dovecot")
	if err != nil {
		bin = "/usr/sbin/dovecot"
		if _, serr := os.Stat(bin); serr != nil {
			missing(t, "dovecot is missing: apt-get install -y dovecot-imapd")
		}
	}
	if _, err := os.Stat(lmtpBin); o.LMTP && err != nil {
		missing(t, "Dovecot's LMTP server is missing: apt-get install -y dovecot-lmtpd")
	}
	return bin
}

// lmtpBin is the binary dovecot-lmtpd installs.
const lmtpBin = "/usr/lib/dovecot/lmtp"

// missing skips the test for want of a package, or fails it when CI=true.
func missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (make test installs it through .ci/deps)", msg)
	}
	t.Skip(msg)
}

// baseDir returns where Dovecot puts its sockets and pid file. A socket
// path is limited to 107 bytes, and the temporary directory of a test with
// a long name can leave too little room; then a shorter directory is made
// in the system's temporary directory.
func baseDir(t testing.TB, dir string) string {
	t.Helper()
	const longestSocket = "/token-login/imap-urlauth" // the longest name Dovecot 2.3 creates
	d := filepath.Join(dir, "run")
	if len(d)+len(longestSocket) < 100 {
		return d
	}
	d, err := os.MkdirTemp("", "dovecot")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if len(d)+len(longestSocket) >= 100 {
		t.Fatalf("no directory short enough for Dovecot's sockets: %s", d)
	}
	return d
}

// ids say whom the mail processes run as.
type ids struct {
	uid, gid     string // as written in the userdb
	name, group  string // the test's user and group, when unprivileged
	uidN, gidN   int
	chown        bool // the mail home must be given to uidN:gidN
	unprivileged bool // Dovecot runs as the test's own user
}

func processIDs(t testing.TB) ids {
	t.Helper()
	if os.Geteuid() != 0 {
		u, err := user.Current()
		if err != nil {
			t.Fatal(err)
		}
		g, err := user.LookupGroupId(u.Gid)
		if err != nil {
			t.Fatal(err)
		}
		return ids{uid: u.Uid, gid: u.Gid, name: u.Username, group: g.Name, unprivileged: true}
	}
	u, err := user.Lookup(mailUser)
	if err != nil {
		t.Fatalf("dovecottest needs the %s user for Dovecot's mail processes: %v", mailUser, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return ids{uid: u.Uid, gid: u.Gid, uidN: uid, gidN: gid, chown: true}
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		// Held open until all are picked, so the kernel cannot hand out
		// the same port twice.
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

type config struct {
	BaseDir, StateDir, Log, Passwd, Home string
	UID, GID                             string
	Unprivileged                         bool
	RunAs, RunAsGroup                    string // the test's user and group names, when Unprivileged
	Port, TLSPort, LMTPPort              int
	Cert, Key                            string
}

// confTemplate is a complete dovecot.conf for Dovecot 2.3: it includes
// nothing from /etc/dovecot, so only the compiled-in defaults apply.
var confTemplate = template.Must(template.New("dovecot.conf").Parse(`# Written by dovecottest for one test.

# Sockets and the pid file. The state directory (default /var/lib/dovecot)
# is where the master records its running instances.
base_dir = {{.BaseDir}}
state_dir = {{.StateDir}}
log_path = {{.Log}}

# The compiled-in default also lists pop3 and lmtp, which dovecot-imapd
# does not install; lmtp comes from dovecot-lmtpd, when asked for.
protocols = imap{{if .LMTPPort}} lmtp{{end}}
listen = 127.0.0.1

# Tests log in with a plain LOGIN without TLS. Dovecot counts loopback as
# secure anyway; say it rather than rely on it.
disable_plaintext_auth = no
# AUTHENTICATE LOGIN as well as PLAIN, for clients that prefer it.
auth_mechanisms = plain login
# Explains failed logins in the log that a failing test prints.
auth_verbose = yes

passdb {
  driver = passwd-file
  args = {{.Passwd}}
}
# One virtual user whose mail processes run as an unprivileged system user:
# Dovecot refuses UID 0 for mail access.
userdb {
  driver = static
  args = uid={{.UID}} gid={{.GID}} home={{.Home}}
}
# The default first_valid_uid (500) would refuse the UID of a system user.
first_valid_uid = 1
mail_location = maildir:~

# A test server has no data worth an fsync.
mail_fsync = never
{{- if .Unprivileged}}

# Not run as root: every process runs as the test's own user, which can
# neither switch users nor chroot.
default_login_user = {{.RunAs}}
default_internal_user = {{.RunAs}}
default_internal_group = {{.RunAsGroup}}
service anvil {
  chroot =
}
{{- end}}
{{if .Cert}}
ssl = yes
ssl_cert = <{{.Cert}}
ssl_key = <{{.Key}}
{{- else}}
ssl = no
{{- end}}

service imap-login {
  inet_listener imap {
    port = {{.Port}}
  }
  # Port 0 disables the listener.
  inet_listener imaps {
    port = {{.TLSPort}}
  }
{{- if .Unprivileged}}
  chroot =
{{- end}}
}
{{- if .LMTPPort}}

# LMTP for an MTA on loopback. The static userdb would take any user; LMTP
# asks the passdb whether the recipient exists, so only User is accepted.
service lmtp {
  inet_listener lmtp {
    port = {{.LMTPPort}}
  }
}
{{- end}}
`))

func writeConfig(t testing.TB, path string, c config) {
	t.Helper()
	var b bytes.Buffer
	if err := confTemplate.Execute(&b, c); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// process is one run of the Dovecot master.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the master has exited
	err  error         // how it exited, once done is closed
}

// startTimeout bounds how long Dovecot may take to greet; it starts in
// about a tenth of a second.
const startTimeout = 15 * time.Second

// run starts the master in the foreground and waits for the greeting on
// every listener. If it does not come, the master is stopped and the error
// carries Dovecot's log.
func (s *Server) run() error {
	// A fresh log per run, so that a failure shows only its own story.
	logf, err := os.OpenFile(s.logFile, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	// A master killed by stop leaves its pid file, and Dovecot refuses to
	// start if that pid has since been given to another process.
	os.Remove(filepath.Join(s.baseDir, "master.pid"))
	cmd := exec.Command(s.bin, "-F", "-c", s.conf)
	// Errors from before the log is open (a bad configuration) go to
	// stderr; keep them with the rest.
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start dovecot: %v", err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.proc = p

	deadline := time.Now().Add(startTimeout)
	addrs := []string{s.Addr}
	if s.TLSAddr != "" {
		addrs = append(addrs, s.TLSAddr)
	}
	if s.LMTPAddr != "" {
		addrs = append(addrs, s.LMTPAddr)
	}
	for _, addr := range addrs {
		for {
			err := s.greeted(addr)
			if err == nil {
				break
			}
			select {
			case <-p.done:
				return fmt.Errorf("dovecot exited (%v) before greeting on %s:\n%s", p.err, addr, s.Log())
			default:
			}
			if time.Now().After(deadline) {
				s.stop()
				return fmt.Errorf("dovecot did not greet on %s within %v (last: %v):\n%s", addr, startTimeout, err, s.Log())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// greeted says whether a greeting comes from addr: IMAP's, or LMTP's on
// LMTPAddr.
func (s *Server) greeted(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if addr == s.TLSAddr {
		tc := tls.Client(conn, s.tls)
		defer tc.Close()
		conn = tc
	}
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	want := "* OK"
	if addr == s.LMTPAddr {
		want = "220 "
	}
	if !strings.HasPrefix(line, want) {
		return fmt.Errorf("greeting %q", line)
	}
	return nil
}

// stop ends Dovecot and waits until it is gone. Stopping a stopped server
// does nothing.
func (s *Server) stop() error {
	p := s.proc
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	// SIGTERM to every process: sessions end with "BYE Server shutting
	// down" and all is over in milliseconds.
	signalAll(p.cmd.Process, syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(200 * time.Millisecond):
	}
	// When a child dies before the master has reaped it, the master
	// sleeps a full second before exiting. The sessions are closed by
	// now, so there is nothing left to wait for; and as the master is
	// still there, its process group cannot belong to anyone else.
	signalAll(p.cmd.Process, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("dovecot (pid %d) survives SIGKILL", p.cmd.Process.Pid)
	}
}

// Restart stops Dovecot and starts it again on the same ports with the same
// mail, for tests of how a client survives a server going away.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.run(); err != nil {
		t.Fatal(err)
	}
}

// Log returns what Dovecot has logged so far.
func (s *Server) Log() string {
	b, err := os.ReadFile(s.logFile)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

// TLSConfig returns a client configuration that trusts the server's
// certificate (for ServerName localhost), or nil without Options.TLS.
func (s *Server) TLSConfig() *tls.Config {
	if s.tls == nil {
		return nil
	}
	return s.tls.Clone()
}

// Client returns a client logged in over plain IMAP, logged out at the end
// of the test.
func (s *Server) Client(t testing.TB) *imapclient.Client {
	t.Helper()
	c, err := s.login()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (s *Server) login() (*imapclient.Client, error) {
	c, err := imapclient.DialInsecure(s.Addr, nil)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %v", s.Addr, err)
	}
	if err := c.Login(s.User, s.Password).Wait(); err != nil {
		c.Close()
		return nil, fmt.Errorf("login to %s: %v\n%s", s.Addr, err, s.Log())
	}
	return c, nil
}

// session runs f on a fresh logged-in connection and logs out.
func (s *Server) session(t testing.TB, f func(c *imapclient.Client) error) {
	t.Helper()
	c, err := s.login()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := f(c); err != nil {
		t.Fatal(err)
	}
	if err := c.Logout().Wait(); err != nil {
		t.Fatal(err)
	}
}

// Append puts the raw RFC 5322 message msg into folder through IMAP APPEND,
// creating the folder if needed, and returns its UID.
func (s *Server) Append(t testing.TB, folder string, msg []byte) uint32 {
	t.Helper()
	var uid uint32
	s.session(t, func(c *imapclient.Client) error {
		if err := create(c, folder); err != nil {
			return err
		}
		cmd := c.Append(folder, int64(len(msg)), nil)
		if _, err := cmd.Write(msg); err != nil {
			return fmt.Errorf("append to %s: %v", folder, err)
		}
		if err := cmd.Close(); err != nil {
			return fmt.Errorf("append to %s: %v", folder, err)
		}
		data, err := cmd.Wait()
		if err != nil {
			return fmt.Errorf("append to %s: %v", folder, err)
		}
		uid = uint32(data.UID)
		return nil
	})
	return uid
}

// create makes folder unless it exists.
func create(c *imapclient.Client, folder string) error {
	if strings.EqualFold(folder, "INBOX") {
		return nil
	}
	err := c.Create(folder, nil).Wait()
	var ierr *imap.Error
	if errors.As(err, &ierr) && ierr.Code == imap.ResponseCodeAlreadyExists {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create %s: %v", folder, err)
	}
	return nil
}

// Messages returns the messages in folder in UID order, read without
// changing their flags (EXAMINE and BODY.PEEK). The folder must exist.
func (s *Server) Messages(t testing.TB, folder string) []Message {
	t.Helper()
	var msgs []Message
	s.session(t, func(c *imapclient.Client) error {
		sel, err := c.Select(folder, &imap.SelectOptions{ReadOnly: true}).Wait()
		if err != nil {
			return fmt.Errorf("examine %s: %v", folder, err)
		}
		if sel.NumMessages == 0 {
			return nil
		}
		body := &imap.FetchItemBodySection{Peek: true}
		bufs, err := c.Fetch(imap.UIDSet{{Start: 1, Stop: 0}}, &imap.FetchOptions{
			UID:         true,
			Flags:       true,
			BodySection: []*imap.FetchItemBodySection{body},
		}).Collect()
		if err != nil {
			return fmt.Errorf("fetch from %s: %v", folder, err)
		}
		for _, b := range bufs {
			m := Message{UID: uint32(b.UID), Raw: b.FindBodySection(body)}
			for _, f := range b.Flags {
				// \Recent belongs to a session, not to the message.
				if strings.EqualFold(string(f), `\Recent`) {
					continue
				}
				m.Flags = append(m.Flags, string(f))
			}
			msgs = append(msgs, m)
		}
		slices.SortFunc(msgs, func(a, b Message) int { return cmp.Compare(a.UID, b.UID) })
		return nil
	})
	return msgs
}

// UIDValidity returns the UIDVALIDITY of folder.
func (s *Server) UIDValidity(t testing.TB, folder string) uint32 {
	t.Helper()
	var v uint32
	s.session(t, func(c *imapclient.Client) error {
		st, err := c.Status(folder, &imap.StatusOptions{UIDValidity: true}).Wait()
		if err != nil {
			return fmt.Errorf("status %s: %v", folder, err)
		}
		v = st.UIDValidity
		return nil
	})
	return v
}

// ResetUIDValidity gives folder a new UIDVALIDITY, as when a server
// rebuilds a mailbox, and returns it. The messages stay, with their UIDs,
// but a client must no longer trust the UIDs it remembers. A session that
// has the folder selected is not told at once, not even while idling: its
// next command gets "* BYE IMAP session state is inconsistent, please
// relogin" and the connection is closed.
func (s *Server) ResetUIDValidity(t testing.TB, folder string) uint32 {
	t.Helper()
	old := s.UIDValidity(t, folder)
	next := old + 1
	if next == 0 { // UIDVALIDITY is a non-zero 32-bit number
		next = 1
	}
	// doveadm (from dovecot-core, like the dovecot binary) rewrites the
	// mailbox index directly, finding the user through this server's
	// configuration and auth socket; the files stay the mail user's.
	doveadm, err := exec.LookPath("doveadm")
	if err != nil {
		doveadm = "/usr/bin/doveadm"
	}
	out, err := exec.Command(doveadm, "-c", s.conf, "mailbox", "update", "-u", s.User,
		"--uid-validity", strconv.FormatUint(uint64(next), 10), folder).CombinedOutput()
	if err != nil {
		t.Fatalf("doveadm mailbox update --uid-validity %d %s: %v\n%s", next, folder, err, out)
	}
	if got := s.UIDValidity(t, folder); got != next {
		t.Fatalf("UIDVALIDITY of %s is %d after setting %d (was %d)", folder, got, next, old)
	}
	return next
}
