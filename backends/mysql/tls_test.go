package mysql_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/mysql"
	"github.com/genropy/postino/internal/testrig/testcert"
)

// tlsServer starts a MariaDB of its own that takes only TLS connections.
func tlsServer(t *testing.T) (addr string, cert testcert.Pair) {
	t.Helper()
	install, err1 := exec.LookPath("mariadb-install-db")
	server, err2 := exec.LookPath("mariadbd")
	if err2 != nil {
		server, err2 = exec.LookPath("/usr/sbin/mariadbd")
	}
	if err1 != nil || err2 != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("mariadbd and mariadb-install-db are needed for the TLS test")
		}
		t.Skip("no mariadbd to start a TLS-only server")
	}
	dir, err := os.MkdirTemp("", "mdb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cert = testcert.New(t, "127.0.0.1")
	if out, err := exec.Command(install, "--no-defaults", "--datadir="+filepath.Join(dir, "data"), "--auth-root-authentication-method=normal",
		"--skip-test-db", "--user=root").CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(server, "--no-defaults", "--datadir="+filepath.Join(dir, "data"), "--socket="+filepath.Join(dir, "sock"),
		fmt.Sprintf("--port=%d", port), "--bind-address=127.0.0.1", "--user=root", "--skip-name-resolve",
		"--ssl-cert="+cert.CertFile, "--ssl-key="+cert.KeyFile, "--require-secure-transport=ON")
	logf, _ := os.Create(filepath.Join(dir, "server.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr = fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			t.Fatalf("the TLS MariaDB did not start:\n%s", log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// root@127.0.0.1 exists only as root@localhost in a fresh install: add it.
	db, err := mysql.Connect(context.Background(), "root@unix("+filepath.Join(dir, "sock")+")/", mysql.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, st := range []string{"CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'", "GRANT ALL ON *.* TO 'root'@'127.0.0.1'", "CREATE DATABASE outbox"} {
		if _, err := db.Exec(st); err != nil {
			t.Fatal(err)
		}
	}
	return addr, cert
}

func TestTLS(t *testing.T) {
	ctx := context.Background()
	addr, cert := tlsServer(t)
	dsn := "root@tcp(" + addr + ")/outbox"
	if _, err := mysql.Connect(ctx, dsn, mysql.Options{}); err == nil {
		t.Fatal("a connection without TLS to a server that requires it succeeded")
	}
	// The authority in a file, verified.
	db, err := mysql.Connect(ctx, dsn, mysql.Options{CAFile: cert.CAFile})
	if err != nil {
		t.Fatalf("TLS with the test authority: %v", err)
	}
	var cipher, ver string
	if err := db.QueryRow("SHOW STATUS LIKE 'Ssl_version'").Scan(&cipher, &ver); err != nil || ver == "" {
		t.Errorf("the session is not encrypted: %q %v", ver, err)
	}
	if _, err := mysql.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := mysql.Open(ctx, dsn, mysql.Options{CAFile: cert.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Create(ctx, &backends.Message{ID: "over-tls", Priority: 2, EmlPath: "x.eml"}); err != nil {
		t.Fatal(err)
	}
	// Or as the DSN asks, with the driver's own modes.
	db, err = mysql.Connect(ctx, dsn+"?tls=skip-verify", mysql.Options{})
	if err != nil {
		t.Fatalf("tls=skip-verify in the DSN: %v", err)
	}
	db.Close()
	// A wrong authority is refused.
	other := testcert.New(t, "127.0.0.1")
	if _, err := mysql.Connect(ctx, dsn, mysql.Options{CAFile: other.CAFile}); err == nil {
		t.Error("a certificate from another authority was accepted")
	}
}
