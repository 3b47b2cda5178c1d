package postgres_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/postgres"
)

func TestReceiptsConformance(t *testing.T) {
	backendtest.RunReceipts(t, func(t *testing.T) backendtest.ReceiptStore { return openStore(t) })
}

// TestReceiptsChunked keeps a receipt in chunks and statements within the
// budget, listed from its first chunk, deleted with the row.
func TestReceiptsChunked(t *testing.T) {
	ctx := context.Background()
	s, db := storeAndDB(t)
	const budget = 64 << 10
	postgres.SetBodyBudget(s, budget)
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
	chunks, largest := count(t, db, "SELECT COUNT(*) FROM email_receipts"), count(t, db, "SELECT MAX(LENGTH(data)) FROM email_receipts")
	if chunks != 6 || largest > budget {
		t.Errorf("%d chunks, the largest %d bytes: want 6, each within %d", chunks, largest, budget)
	}
	if list, err := s.Receipts(ctx, "pec-1"); err != nil || len(list) != 1 || list[0].Size != int64(len(raw)) {
		t.Errorf("listed %+v, %v", list, err)
	}
	if _, err := db.Exec(ctx, "DELETE FROM emails WHERE id = 'pec-1'"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM email_receipts"); n != 0 {
		t.Errorf("%d chunks left after their row was deleted", n)
	}
}
