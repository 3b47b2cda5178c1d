package submissions_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/internal/testrig/logtest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/internal/testrig/sqltest"
	"github.com/genropy/postino/relay/admin"
	"github.com/genropy/postino/relay/relaytest"
	"github.com/genropy/postino/relay/submissions"
)

// TestStartDegraded: an app's database that cannot be read when the relay
// starts (the server down, the database or the table missing, the user
// refused) leaves the relay running and degraded: /readyz names the
// table and says what to do, the reader retries with back-off, and the log
// says so once, not at every retry. Once the database is mended, the
// table is read again with no restart.
func TestStartDegraded(t *testing.T) {
	cases := []struct {
		name string
		// broken is the DSN the relay is given and what mends it, nil
		// where only the configuration can.
		broken func(t *testing.T, driver string) (dsn string, mend func() *app)
		advice string
	}{
		{"server down", serverDown, "does not answer"},
		{"database missing", databaseMissing, "database does not exist"},
		{"table missing", tableMissing, "postino submissions migrate --driver"},
		{"access refused", accessRefused, "refused the DSN's user"},
	}
	for _, driver := range drivers {
		for _, tc := range cases {
			t.Run(driver+"/"+tc.name, func(t *testing.T) {
				dsn, mend := tc.broken(t, driver)
				up := smtptest.Start(t, smtptest.Options{})
				log, logs := logtest.Logger()
				r, _ := relaytest.StartLog(t, relayConfig(t, driver, dsn, up, 100*time.Millisecond), log)
				c := &admin.Client{Base: r.AdminAddr().String()}
				check := "submissions " + driver + ":postino_submissions"
				var ready admin.Readiness
				waitFor(t, time.Minute, func() string { return fmt.Sprintf("readiness %+v; want %s failing with %q", ready, check, tc.advice) }, func() bool {
					ready, _ = c.Ready(context.Background())
					return ready.Status == "degraded" && strings.Contains(ready.Checks[check], tc.advice)
				})
				// Several retries, one warning.
				waitFor(t, time.Minute, func() string { return "fewer than 5 failed reads counted" }, func() bool {
					return failures(t, c) >= 5
				})
				if n := logs.Count("cannot read the table"); n != 1 {
					t.Errorf("%d warnings that the table cannot be read; want 1:\n%s", n, logs)
				}
				if n := logs.Count("notifications lost"); n > 1 {
					t.Errorf("%d warnings that notifications are lost; want at most 1:\n%s", n, logs)
				}
				ids := make(chan string, 1)
				ids <- "by-smtp"
				close(ids)
				sendSMTP(t, r.SMTPAddr().String(), ids)
				waitFor(t, time.Minute, func() string { return "the SMTP message was not delivered while degraded" }, func() bool {
					return len(up.Messages()) == 1
				})
				if mend == nil {
					return
				}
				a := mend()
				a.commit(t, submission{ID: "mended", From: "app@example.com", To: []string{"user@example.net"}, Message: plain("mended")})
				status(t, c, "mended", "SENT-ACKNOWLEDGED")
				waitFor(t, time.Minute, func() string { return fmt.Sprintf("readiness %+v; want %s ok", ready, check) }, func() bool {
					ready, _ = c.Ready(context.Background())
					return ready.Checks[check] == "ok"
				})
				if n := logs.Count("the table is read again"); n != 1 {
					t.Errorf("%d notices that the table is read again; want 1:\n%s", n, logs)
				}
			})
		}
	}
}

// serverDown is a DSN whose server does not answer, until mend forwards
// its port to the real server.
func serverDown(t *testing.T, driver string) (string, func() *app) {
	a := newApp(t, driver)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close()
	server := withHost(t, a.dsn, "")
	return withHost(t, a.dsn, down), func() *app {
		forward(t, down, server)
		return a
	}
}

// databaseMissing is a DSN whose database is not there, until mend
// creates it and its table.
func databaseMissing(t *testing.T, driver string) (string, func() *app) {
	dsn := sqltest.Database(t, driver)
	name := databaseName(t, dsn)
	server := serverDB(t, driver)
	if _, err := server.Exec("DROP DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	return dsn, func() *app {
		if _, err := server.Exec("CREATE DATABASE " + name); err != nil {
			t.Fatal(err)
		}
		return migrated(t, driver, dsn)
	}
}

// tableMissing is a DSN of a database without the submissions table, until
// mend migrates it.
func tableMissing(t *testing.T, driver string) (string, func() *app) {
	dsn := sqltest.Database(t, driver)
	return dsn, func() *app { return migrated(t, driver, dsn) }
}

// accessRefused is a DSN whose user the server refuses: MariaDB a wrong
// password, PostgreSQL (trusting every password here) a user it lacks.
func accessRefused(t *testing.T, driver string) (string, func() *app) {
	dsn := newApp(t, driver).dsn
	if driver == "mysql" {
		return strings.Replace(dsn, "root@", "root:not-the-password@", 1), nil
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User("no_such_postino_user")
	return u.String(), nil
}

func migrated(t *testing.T, driver, dsn string) *app {
	if err := submissions.Migrate(context.Background(), driver, dsn, submissions.DefaultTable); err != nil {
		t.Fatal(err)
	}
	return openApp(t, driver, dsn)
}

// serverDB is a connection to the test server itself, with no database.
func serverDB(t *testing.T, driver string) *sql.DB {
	db, err := sql.Open(map[string]string{"postgres": "pgx", "mysql": "mysql"}[driver], sqltest.ServerDSN(driver))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// dsnHosts find the server's host:port in a MySQL DSN, then in a URL.
var dsnHosts = []*regexp.Regexp{regexp.MustCompile(`tcp\(([^)]*)\)`), regexp.MustCompile(`@([^/]*)/`)}

// withHost is dsn with its server's host:port replaced by host, or, with
// host empty, that host:port.
func withHost(t *testing.T, dsn, host string) string {
	for _, re := range dsnHosts {
		if m := re.FindStringSubmatchIndex(dsn); m != nil {
			if host == "" {
				return dsn[m[2]:m[3]]
			}
			return dsn[:m[2]] + host + dsn[m[3]:]
		}
	}
	t.Fatalf("the DSN %q names no server", dsn)
	return ""
}

func databaseName(t *testing.T, dsn string) string {
	i := strings.LastIndexByte(dsn, '/')
	name, _, _ := strings.Cut(dsn[i+1:], "?")
	if i < 0 || name == "" {
		t.Fatalf("the DSN %q names no database", dsn)
	}
	return name
}

// forward forwards the connections to addr to target until the test ends.
func forward(t *testing.T, addr, target string) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s again: %v", addr, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer s.Close()
				go io.Copy(s, c)
				io.Copy(c, s)
			}()
		}
	}()
}

// failures is the count of batches the relay could not take.
func failures(t *testing.T, c *admin.Client) int {
	m := regexp.MustCompile(`(?m)^postino_submissions_failures_total\{[^}]*\} (\d+)`).FindStringSubmatch(metrics(t, c))
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
