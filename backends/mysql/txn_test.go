package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/mysql"
)

// probeDB connects to a fresh database holding a table txn_probe of keys,
// closed with the test.
func probeDB(t *testing.T) *sql.DB {
	t.Helper()
	ctx := context.Background()
	db, err := mysql.Connect(ctx, freshDatabase(t), mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.ExecContext(ctx, "CREATE TABLE txn_probe (k INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	return db
}

// A transaction starts with its first statement and ends with its last
// writes: committed together, or not at all when the server refuses one of
// them or the connection ends before the COMMIT.
func TestTxn(t *testing.T) {
	ctx := context.Background()
	db := probeDB(t)
	// one reads the one number query returns.
	one := func(tx *mysql.Txn, query string) int64 {
		t.Helper()
		rows, err := tx.QueryContext(ctx, query)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var n int64
		if !rows.Next() {
			t.Fatalf("%s: no row, %v", query, rows.Err())
		}
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	kill := func(tx *mysql.Txn) {
		id := one(tx, "SELECT CONNECTION_ID()")
		tx.Last(mysql.Stmt("INSERT INTO txn_probe VALUES (3)"), mysql.Stmt(fmt.Sprintf("KILL CONNECTION %d", id)))
	}
	tests := []struct {
		name    string
		last    func(*mysql.Txn)
		refused bool // the error is the server's refusal, whose outcome is known
		failed  bool
		rows    int
	}{
		{name: "commits", last: func(tx *mysql.Txn) {
			tx.Last(mysql.Stmt("INSERT INTO txn_probe VALUES (2), (3)"))
		}, rows: 3},
		{name: "a refused write undoes all", last: func(tx *mysql.Txn) {
			tx.Last(mysql.Stmt("INSERT INTO txn_probe VALUES (2)"), mysql.Stmt("INSERT INTO txn_probe VALUES (2)"))
		}, refused: true, failed: true},
		{name: "a connection lost before the COMMIT undoes all", last: kill, failed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := db.ExecContext(ctx, "DELETE FROM txn_probe"); err != nil {
				t.Fatal(err)
			}
			tx, err := mysql.Begin(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if in := one(tx, "SELECT @@in_transaction"); in != 1 {
				t.Fatalf("the first statement ran in a transaction: %d; want 1", in)
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO txn_probe VALUES (1)"); err != nil {
				t.Fatal(err)
			}
			tt.last(tx)
			err = tx.Commit()
			tx.Rollback()
			var me *gomysql.MySQLError
			refused := errors.As(err, &me) && me.Number == 1062 && !errors.Is(err, backends.ErrOutcomeUnknown)
			if (err != nil) != tt.failed || tt.refused && !refused {
				t.Errorf("commit: %v, want failed %v, refused by the server %v", err, tt.failed, tt.refused)
			}
			var n int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM txn_probe").Scan(&n); err != nil || n != tt.rows {
				t.Errorf("%d rows, %v; want %d", n, err, tt.rows)
			}
			// The pool's connections hold no transaction left open.
			for range 4 {
				var in int
				if err := db.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&in); err != nil || in != 0 {
					t.Errorf("a pooled connection is in a transaction: %d, %v", in, err)
				}
			}
		})
	}
}

// Deferred statements go with the next query, whose rows are its own, or
// with the COMMIT when none comes; each reader gets its statement's rows.
func TestTxnDefer(t *testing.T) {
	ctx := context.Background()
	db := probeDB(t)
	for _, query := range []bool{true, false} {
		if _, err := db.ExecContext(ctx, "DELETE FROM txn_probe"); err != nil {
			t.Fatal(err)
		}
		tx, err := mysql.Begin(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		var seen []int
		tx.Defer(mysql.Stmt("INSERT INTO txn_probe VALUES (5), (6)"), nil)
		tx.Defer(mysql.Stmt("SELECT k FROM txn_probe ORDER BY k"), func(rows *sql.Rows) error {
			for rows.Next() {
				var k int
				if err := rows.Scan(&k); err != nil {
					return err
				}
				seen = append(seen, k)
			}
			return rows.Err()
		})
		if query {
			rows, err := tx.QueryContext(ctx, "SELECT COUNT(*) + 100 FROM txn_probe")
			if err != nil {
				t.Fatal(err)
			}
			var n int
			if !rows.Next() || rows.Scan(&n) != nil || n != 102 {
				t.Errorf("the query's own rows: %d, want 102", n)
			}
			rows.Close()
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(seen) != "[5 6]" {
			t.Errorf("with a query %v: the reader saw %v, want [5 6]", query, seen)
		}
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM txn_probe").Scan(&n); err != nil || n != 2 {
			t.Errorf("with a query %v: %d rows committed, %v; want 2", query, n, err)
		}
	}
}
