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
	base, sqlDriver := serverDSN(driver)
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
	name := fmt.Sprintf("postino_test_%d", time.Now().UnixNano())
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

// serverDSN is the DSN of the server of driver, and database/sql's name
// of its driver.
func serverDSN(driver string) (dsn, sqlDriver string) {
	dsn = os.Getenv(envName(driver))
	if driver == "postgres" {
		if dsn == "" {
			dsn = "postgres://root@127.0.0.1:5432/test"
		}
		return dsn, "pgx"
	}
	if dsn == "" {
		dsn = "root@tcp(127.0.0.1:3306)/"
	}
	return dsn, "mysql"
}
