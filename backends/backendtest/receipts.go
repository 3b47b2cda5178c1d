package backendtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

// ReceiptStore is a store that keeps the receipts of the messages whose
// bytes it keeps (spool.store outbox), as spool.Store says.
type ReceiptStore interface {
	messageStore
	SaveReceipt(ctx context.Context, id, name string, raw []byte) error
	Receipts(ctx context.Context, id string) ([]backends.Receipt, error)
	OpenReceipt(ctx context.Context, id, name string) (io.ReadCloser, error)
}

// RunReceipts runs the receipts' tests against the stores open returns,
// fresh and empty for each test as Run's.
func RunReceipts(t *testing.T, open func(t *testing.T) ReceiptStore) {
	group(t, "Receipts", receiptTests, open)
}

var receiptTests = []test[ReceiptStore]{
	{"SavedListedRead", testReceiptsSaved},
	{"SavedOnce", testReceiptsSavedOnce},
	{"NotThere", testReceiptsNotThere},
	{"Purged", testReceiptsPurged},
}

// largeReceipt is beyond what one row or item of the stores holds, and
// what one DynamoDB transaction carries: a delivery receipt that holds the
// original message, attachments and all.
const largeReceipt = 3<<20 + 4321

// receiptBytes makes n bytes of every octet value, different for each seed.
func receiptBytes(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// keptMessage creates a message whose bytes the store keeps, as intake
// makes one with spool.store outbox.
func keptMessage(t *testing.T, s ReceiptStore, id string) *backends.Message {
	t.Helper()
	m := newMessage(id)
	m.EmlPath, m.Body = backends.BodyRef(id, backends.Nonce()), []byte("Subject: certified\r\n\r\nsent by PEC\r\n")
	return create(t, s, m)
}

func saveReceipt(t *testing.T, s ReceiptStore, id, name string, raw []byte) {
	t.Helper()
	if err := s.SaveReceipt(context.Background(), id, name, raw); err != nil {
		t.Fatalf("SaveReceipt(%s, %s): %v", id, name, err)
	}
}

func readReceipt(t *testing.T, s ReceiptStore, id, name string) []byte {
	t.Helper()
	r, err := s.OpenReceipt(context.Background(), id, name)
	return readAll(t, r, err, "receipt "+name+" of "+id)
}

// testReceiptsSaved: receipts of any size are listed by name, with their
// size and time, and read back as they came.
func testReceiptsSaved(t *testing.T, s ReceiptStore) {
	ctx := context.Background()
	keptMessage(t, s, "pec-1")
	if list, err := s.Receipts(ctx, "pec-1"); err != nil || len(list) != 0 {
		t.Fatalf("receipts of a message without any: %+v, %v", list, err)
	}
	want := map[string][]byte{
		"avvenuta-consegna-b.eml": receiptBytes(largeReceipt, 1),
		"accettazione-a.eml":      receiptBytes(4<<10, 2),
		"empty.eml":               {},
	}
	before := time.Now().Add(-time.Minute)
	for name, raw := range want {
		saveReceipt(t, s, "pec-1", name, raw)
	}
	list, err := s.Receipts(ctx, "pec-1")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range list {
		names = append(names, r.Name)
		if r.Size != int64(len(want[r.Name])) || r.SavedAt.Before(before) || r.SavedAt.After(time.Now().Add(time.Minute)) {
			t.Errorf("listed %+v, want %d bytes saved now", r, len(want[r.Name]))
		}
	}
	if got := names; len(got) != 3 || got[0] != "accettazione-a.eml" || got[1] != "avvenuta-consegna-b.eml" || got[2] != "empty.eml" {
		t.Errorf("listed %v, want the three by name", got)
	}
	for name, raw := range want {
		if got := readReceipt(t, s, "pec-1", name); !bytes.Equal(got, raw) {
			t.Errorf("%s: read %d bytes back, want %d, equal %v", name, len(got), len(raw), bytes.Equal(got, raw))
		}
	}
	// The message's own bytes are not a receipt's, nor the other way.
	if h, err := s.History(ctx, "pec-1"); err != nil || len(h) != 1 {
		t.Errorf("history beside receipts: %+v, %v", h, err)
	}
}

// testReceiptsSavedOnce: a receipt read twice, or saved by two relays at
// once, is kept once, whole: the first copy recorded stays.
func testReceiptsSavedOnce(t *testing.T, s ReceiptStore) {
	ctx := context.Background()
	keptMessage(t, s, "pec-1")
	copies := [][]byte{receiptBytes(largeReceipt, 3), receiptBytes(largeReceipt+1, 4)}
	var wg sync.WaitGroup
	errs := make(chan error, len(copies))
	for _, raw := range copies {
		wg.Go(func() { errs <- s.SaveReceipt(ctx, "pec-1", "avvenuta-consegna.eml", raw) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("SaveReceipt at once: %v", err)
		}
	}
	kept := readReceipt(t, s, "pec-1", "avvenuta-consegna.eml")
	if !bytes.Equal(kept, copies[0]) && !bytes.Equal(kept, copies[1]) {
		t.Fatalf("kept %d bytes that are neither copy", len(kept))
	}
	saveReceipt(t, s, "pec-1", "avvenuta-consegna.eml", []byte("read again"))
	if got := readReceipt(t, s, "pec-1", "avvenuta-consegna.eml"); !bytes.Equal(got, kept) {
		t.Errorf("saving again replaced the receipt with %d bytes", len(got))
	}
	list, err := s.Receipts(ctx, "pec-1")
	if err != nil || len(list) != 1 || list[0].Size != int64(len(kept)) {
		t.Errorf("listed %+v, %v: want one receipt of %d bytes", list, err, len(kept))
	}
}

// testReceiptsNotThere: receipts of a message that is not there, or that
// it does not have, are ErrNotFound; a name that is not a plain file
// name is refused.
func testReceiptsNotThere(t *testing.T, s ReceiptStore) {
	ctx := context.Background()
	if err := s.SaveReceipt(ctx, "nobody", "accettazione.eml", []byte("x")); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("SaveReceipt of no message = %v", err)
	}
	if _, err := s.Receipts(ctx, "nobody"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("Receipts of no message = %v", err)
	}
	if _, err := s.OpenReceipt(ctx, "nobody", "accettazione.eml"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("OpenReceipt of no message = %v", err)
	}
	keptMessage(t, s, "pec-1")
	if _, err := s.OpenReceipt(ctx, "pec-1", "accettazione.eml"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("OpenReceipt of a receipt not kept = %v", err)
	}
	for _, bad := range []string{"", "../x.eml", "a/b.eml", ".hidden", strings.Repeat("a", backends.MaxReceiptName+1)} {
		if err := s.SaveReceipt(ctx, "pec-1", bad, []byte("x")); err == nil || errors.Is(err, backends.ErrNotFound) {
			t.Errorf("SaveReceipt(%q) = %v", bad, err)
		}
	}
}

// testReceiptsPurged: retention removes a message's receipts with it; a
// message submitted again under its id has none of them.
func testReceiptsPurged(t *testing.T, s ReceiptStore) {
	ctx := context.Background()
	m := keptMessage(t, s, "pec-1")
	saveReceipt(t, s, "pec-1", "accettazione.eml", receiptBytes(4<<10, 5))
	saveReceipt(t, s, "pec-1", "avvenuta-consegna.eml", receiptBytes(largeReceipt, 6))
	advance(t, s, m, backends.StatusSentAcknowledged)
	purged, err := s.Purge(ctx, at(time.Hour), 100)
	if err != nil || len(purged) != 1 {
		t.Fatalf("Purge = %d messages, %v", len(purged), err)
	}
	if _, err := s.Receipts(ctx, "pec-1"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("Receipts of a purged message = %v", err)
	}
	keptMessage(t, s, "pec-1")
	if list, err := s.Receipts(ctx, "pec-1"); err != nil || len(list) != 0 {
		t.Errorf("a new submission of a purged id lists %+v, %v", list, err)
	}
	if _, err := s.OpenReceipt(ctx, "pec-1", "accettazione.eml"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("a new submission of a purged id reads its receipt: %v", err)
	}
}
