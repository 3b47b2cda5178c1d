package mysql_test

import (
	"context"
	"testing"

	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/mysql"
)

func TestReceiptsConformance(t *testing.T) {
	backendtest.RunReceipts(t, func(t *testing.T) backendtest.ReceiptStore { return open(t).(*mysql.Store) })
}

func TestReceiptsChunked(t *testing.T) { backendtest.ReceiptsChunked(t, sqlStore(t)) }

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
