// Package sqltest makes a database of its own for a test, on the real
// PostgreSQL (TEST_POSTINO_POSTGRES_DSN) or MySQL/MariaDB
// (TEST_POSTINO_MYSQL_DSN) server, and drops it when the test ends.
package sqltest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
)

// Database creates a database on the server of driver (postgres or mysql)
// and returns its DSN. With CI=true a server that does not answer fails
// the test; otherwise the test is skipped.
func Database(t testing.TB, driver string) string {
	t.Helper()
	base, sqlDriver := ServerDSN(driver), sqlDriverOf(driver)
	db, err := sql.Open(sqlDriver, base)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = db.PingContext(ctx)
		cancel()
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is needed (%s): %v", driver, envName(driver), err)
		}
		t.Skipf("no %s (%s): %v", driver, envName(driver), err)
	}
	defer db.Close()
	// The process and the time: a database a killed run left behind, or
	// another package's test running at once, has another name.
	name := fmt.Sprintf("postino_test_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6, counter.Add(1))
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db, err := sql.Open(sqlDriver, base)
		if err != nil {
			return
		}
		defer db.Close()
		drop := "DROP DATABASE " + name
		if driver == "postgres" {
			drop += " WITH (FORCE)" // the relay's LISTEN connection may linger
		}
		if _, err := db.Exec(drop); err != nil {
			t.Logf("drop the test database %s: %v", name, err)
		}
	})
	if driver == "postgres" {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		u.Path = "/" + name
		return u.String()
	}
	return strings.TrimSuffix(base, "/") + "/" + name
}

func envName(driver string) string {
	if driver == "postgres" {
		return "TEST_POSTINO_POSTGRES_DSN"
	}
	return "TEST_POSTINO_MYSQL_DSN"
}

var counter atomic.Int64

// ServerDSN is the DSN of the server of driver, with no database for
// MySQL: the environment's (TEST_POSTINO_POSTGRES_DSN,
// TEST_POSTINO_MYSQL_DSN) or the local server's.
func ServerDSN(driver string) string {
	if dsn := os.Getenv(envName(driver)); dsn != "" {
		return dsn
	}
	if driver == "postgres" {
		return "postgres://root@127.0.0.1:5432/test"
	}
	return "root@tcp(127.0.0.1:3306)/"
}

// sqlDriverOf is database/sql's name of driver.
func sqlDriverOf(driver string) string {
	if driver == "postgres" {
		return "pgx"
	}
	return "mysql"
}
