package mysql_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/mysql"
)

func TestReceiptsConformance(t *testing.T) {
	backendtest.RunReceipts(t, func(t *testing.T) backendtest.ReceiptStore { return open(t).(*mysql.Store) })
}

// TestReceiptsChunked keeps a receipt in chunks and statements within the
// packet budget, listed from its first chunk, deleted with the row.
func TestReceiptsChunked(t *testing.T) {
	ctx := context.Background()
	s, db := storeAndDB(t)
	const budget = 64 << 10
	mysql.SetBodyBudget(s, budget)
	if err := s.Create(ctx, backendtest.BodyMessage("pec-1", "0123456789ab", []byte("Subject: x\r\n\r\nx\r\n"))); err != nil {
		t.Fatal(err)
	}
	raw := backendtest.RandomBytes(5*budget + 17)
	if err := s.SaveReceipt(ctx, "pec-1", "avvenuta-consegna.eml", raw); err != nil {
		t.Fatal(err)
	}
	r, err := s.OpenReceipt(ctx, "pec-1", "avvenuta-consegna.eml")
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	got.ReadFrom(r)
	if !bytes.Equal(got.Bytes(), raw) {
		t.Errorf("read %d bytes back, want %d", got.Len(), len(raw))
	}
	var chunks, largest int
	if err := db.QueryRow("SELECT COUNT(*), MAX(LENGTH(data)) FROM email_receipts").Scan(&chunks, &largest); err != nil {
		t.Fatal(err)
	}
	if chunks != 6 || largest > budget {
		t.Errorf("%d chunks, the largest %d bytes: want 6, each within %d", chunks, largest, budget)
	}
	if list, err := s.Receipts(ctx, "pec-1"); err != nil || len(list) != 1 || list[0].Size != int64(len(raw)) {
		t.Errorf("listed %+v, %v", list, err)
	}
	if _, err := db.Exec("DELETE FROM emails WHERE id = 'pec-1'"); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT COUNT(*) FROM email_receipts").Scan(&chunks); err != nil || chunks != 0 {
		t.Errorf("%d chunks left after their row was deleted (%v)", chunks, err)
	}
}

// TestMigrateReceipts migrates a schema-7 outbox whose messages' bytes
// it keeps: their receipts are kept in it from then on.
func TestMigrateReceipts(t *testing.T) {
	ctx := context.Background()
	s := migratedFrom(t, 7, "outbox:old-1.0123456789ab")
	if err := s.SaveReceipt(ctx, "old-1", "accettazione.eml", []byte("accepted")); err != nil {
		t.Fatal(err)
	}
	if list, err := s.Receipts(ctx, "old-1"); err != nil || len(list) != 1 || list[0].Name != "accettazione.eml" {
		t.Errorf("listed %+v, %v", list, err)
	}
}
