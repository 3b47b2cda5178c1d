package spool_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/spool"
)

func TestReceipts(t *testing.T) {
	s := openSpool(t)
	path := write(t, s, "pec-1", time.Now(), []byte("Subject: x\r\n\r\nx\r\n"))
	if got, err := s.Receipts(path); err != nil || len(got) != 0 {
		t.Fatalf("receipts of a message without any: %v %v", got, err)
	}
	for _, r := range []struct{ name, body string }{
		{"avvenuta-consegna-b.eml", "delivered to b"},
		{"accettazione-a.eml", "accepted"},
		{"accettazione-a.eml", "accepted"}, // read twice: kept once
	} {
		if err := s.SaveReceipt(path, r.name, []byte(r.body)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Receipts(path)
	if err != nil || len(got) != 2 || got[0].Name != "accettazione-a.eml" || got[1].Size != int64(len("delivered to b")) {
		t.Fatalf("receipts %+v %v", got, err)
	}
	rf, err := s.OpenReceipt(path, "accettazione-a.eml")
	if got := contents(t, rf, err); got != "accepted" {
		t.Errorf("receipt holds %q", got)
	}
	for _, bad := range []string{"", "../x.eml", "a/b.eml", ".hidden"} {
		if err := s.SaveReceipt(path, bad, nil); err == nil {
			t.Errorf("SaveReceipt(%q) was accepted", bad)
		}
		if _, err := s.OpenReceipt(path, bad); err == nil {
			t.Errorf("OpenReceipt(%q) was accepted", bad)
		}
	}
	// Walk sees the message, not its receipts.
	var walked []string
	s.Walk(func(e spool.Entry) error { walked = append(walked, e.ID); return nil })
	if strings.Join(walked, ",") != "pec-1" {
		t.Errorf("Walk found %v", walked)
	}
	// The receipts go with the message.
	if err := s.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), strings.TrimSuffix(path, ".eml")+".receipts")); !os.IsNotExist(err) {
		t.Errorf("receipts left after Remove: %v", err)
	}
}

// memReceipts keeps receipts by message id and name, as an outbox would.
type memReceipts map[string]map[string][]byte

func (m memReceipts) SaveReceipt(_ context.Context, id, name string, raw []byte) error {
	if m[id] == nil {
		return backends.ErrNotFound
	}
	m[id][name] = raw
	return nil
}

func (m memReceipts) Receipts(_ context.Context, id string) ([]backends.Receipt, error) {
	var out []backends.Receipt
	for name, raw := range m[id] {
		out = append(out, backends.Receipt{Name: name, Size: int64(len(raw))})
	}
	return out, nil
}

func (m memReceipts) OpenReceipt(_ context.Context, id, name string) (io.ReadCloser, error) {
	raw, ok := m[id][name]
	if !ok {
		return nil, backends.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(raw)), nil
}

// TestReceiptsWhereTheBytesAre keeps each message's receipts where its path says its
// bytes are: the spool for a file's path, the store for a BodyRef,
// whatever the relay writes; one a relay cannot reach is an error, and a
// receipt not kept is ErrNotFound wherever it would be.
func TestReceiptsWhereTheBytesAre(t *testing.T) {
	ctx := context.Background()
	files := openSpool(t)
	onDisk := write(t, files, "disk-1", time.Now(), []byte("from the spool"))
	inStore := backends.BodyRef("kept-1", "0123456789ab")
	tests := []struct {
		name, path string
		store      memReceipts
		ok         bool
	}{
		{"spool file", onDisk, memReceipts{}, true},
		{"spool file, no store", onDisk, nil, true},
		{"in the store", inStore, memReceipts{"kept-1": {}}, true},
		{"a relay whose outbox keeps no bytes", inStore, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var store spool.Store
			if tt.store != nil {
				store = memStore{memReceipts: tt.store}
			}
			e := spool.NewBodies(files, store)
			err := e.SaveReceipt(ctx, tt.path, "accettazione.eml", []byte("accepted"))
			if !tt.ok {
				if err == nil {
					t.Fatal("a receipt was saved where its message's bytes cannot be reached")
				}
				if _, err := e.Receipts(ctx, tt.path); err == nil || errors.Is(err, backends.ErrNotFound) {
					t.Errorf("Receipts = %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			list, err := e.Receipts(ctx, tt.path)
			if err != nil || len(list) != 1 || list[0].Name != "accettazione.eml" || list[0].Size != 8 {
				t.Fatalf("listed %+v, %v", list, err)
			}
			r, err := e.OpenReceipt(ctx, tt.path, "accettazione.eml")
			if got := contents(t, r, err); got != "accepted" {
				t.Errorf("read %q", got)
			}
			if _, err := e.OpenReceipt(ctx, tt.path, "avvenuta-consegna.eml"); !errors.Is(err, backends.ErrNotFound) {
				t.Errorf("OpenReceipt of a receipt not kept = %v", err)
			}
			if onFiles, _ := files.Receipts(tt.path); (tt.path == onDisk) != (len(onFiles) == 1) {
				t.Errorf("the spool keeps %+v", onFiles)
			}
		})
	}
}
