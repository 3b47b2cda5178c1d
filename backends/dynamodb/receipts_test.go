package dynamodb_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/genropy/postino/backends/backendtest"
)

func TestReceiptsConformance(t *testing.T) {
	backendtest.RunReceipts(t, func(t *testing.T) backendtest.ReceiptStore { return openStore(t, freshTable(t, 0)) })
}

// TestReceiptItems keeps receipts in the message's partition, in chunks
// under the item's limit, written by their transaction or before it, out
// of History's way; Purge deletes them with the message, and Restore's
// sweep the chunks of a receipt whose transaction never came.
func TestReceiptItems(t *testing.T) {
	ctx := context.Background()
	opts := freshTable(t, 0)
	s := openStore(t, opts)
	if err := s.Create(ctx, backendtest.BodyMessage("pec-1", "0123456789ab", []byte("Subject: x\r\n\r\nx\r\n"))); err != nil {
		t.Fatal(err)
	}
	sizes := map[string]int{"small.eml": 4 << 10, "chunked.eml": 2*chunk + 1, "staged.eml": txBytes + 1}
	for name, n := range sizes {
		if err := s.SaveReceipt(ctx, "pec-1", name, backendtest.RandomBytes(n)); err != nil {
			t.Fatalf("save %s: %v", name, err)
		}
	}
	want := 0
	for _, n := range sizes {
		want += (n + chunk - 1) / chunk
	}
	keys := itemKeys(t, opts, "pec-1")
	if c := countPrefix(keys, "_RECEIPT#"); c != want {
		t.Errorf("%d receipt chunks, want %d: %v", c, want, keys)
	}
	if c := countPrefix(keys, "_SPOOLING#"); c != 0 {
		t.Errorf("%d pending items left after the receipts were recorded", c)
	}
	if h, err := s.History(ctx, "pec-1"); err != nil || len(h) != 1 {
		t.Errorf("history %+v, %v", h, err)
	}

	// A relay died between the chunks of a receipt and its transaction:
	// they are given up with the pending item once they have waited.
	if err := s.StageReceipt(ctx, "pec-1", "dead00000000", backendtest.RandomBytes(txBytes+1)); err != nil {
		t.Fatal(err)
	}
	if err := s.SweepSpooling(ctx, time.Now().Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if after := itemKeys(t, opts, "pec-1"); !slices.Equal(after, keys) {
		t.Errorf("after the sweep, items %v, want %v", after, keys)
	}
	if list, err := s.Receipts(ctx, "pec-1"); err != nil || len(list) != len(sizes) {
		t.Errorf("listed %+v, %v", list, err)
	}

	acknowledge(t, s, "pec-1")
	if purged, err := s.Purge(ctx, time.Now().Add(time.Second), 100); err != nil || len(purged) != 1 {
		t.Fatalf("purged %d messages: %v", len(purged), err)
	}
	if keys := itemKeys(t, opts, "pec-1"); len(keys) != 0 {
		t.Errorf("items left after the purge: %v", keys)
	}
}
