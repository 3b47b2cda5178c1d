package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/mysql"
)

// A transaction starts with its first statement and ends with its last
// writes: committed together, or not at all when the server refuses one of
// them or the connection ends before the COMMIT.
func TestTxn(t *testing.T) {
	ctx := context.Background()
	db, err := mysql.Connect(ctx, freshDatabase(t), mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE TABLE txn_probe (k INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	kill := func(tx *mysql.Txn) {
		var id int64
		if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			t.Fatal(err)
		}
		tx.Last(mysql.Stmt("INSERT INTO txn_probe VALUES (3)"), mysql.Stmt(fmt.Sprintf("KILL CONNECTION %d", id)))
	}
	tests := []struct {
		name    string
		last    func(*mysql.Txn)
		wantErr error // nil, or what the error must be
		failed  bool
		rows    int
	}{
		{name: "commits", last: func(tx *mysql.Txn) {
			tx.Last(mysql.Stmt("INSERT INTO txn_probe VALUES (2), (3)"))
		}, rows: 3},
		{name: "a refused write undoes all", last: func(tx *mysql.Txn) {
			tx.Last(mysql.Stmt("INSERT INTO txn_probe VALUES (2)"), mysql.Stmt("INSERT INTO txn_probe VALUES (2)"))
		}, wantErr: backends.ErrDuplicate, failed: true},
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
			var in int
			if err := tx.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&in); err != nil || in != 1 {
				t.Fatalf("the first statement ran in a transaction: %d, %v; want 1", in, err)
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO txn_probe VALUES (1)"); err != nil {
				t.Fatal(err)
			}
			tt.last(tx)
			err = tx.Commit()
			tx.Rollback()
			if (err != nil) != tt.failed || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("commit: %v, want failed %v with %v", err, tt.failed, tt.wantErr)
			}
			var n int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM txn_probe").Scan(&n); err != nil || n != tt.rows {
				t.Errorf("%d rows, %v; want %d", n, err, tt.rows)
			}
			// The pool's connections hold no transaction left open.
			for range 4 {
				if err := db.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&in); err != nil || in != 0 {
					t.Errorf("a pooled connection is in a transaction: %d, %v", in, err)
				}
			}
		})
	}
}
