package spool_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/spool"
)

// memStore keeps bodies by message id, and receipts, as an outbox would.
type memStore struct {
	bodies map[string]string
	memReceipts
}

func (m memStore) OpenBody(_ context.Context, id string) (io.ReadCloser, error) {
	b, ok := m.bodies[id]
	if !ok {
		return nil, backends.ErrNotFound
	}
	return io.NopCloser(strings.NewReader(b)), nil
}

// TestBodies reads each message where its path says, whatever the relay
// writes: the spool for a file's path, the store for a BodyRef; bytes that
// cannot be read are counted with the spool's.
func TestBodies(t *testing.T) {
	files := openSpool(t)
	onDisk := write(t, files, "disk-1", time.Now(), []byte("from the spool"))
	store := memStore{bodies: map[string]string{"kept.1": "from the outbox"}}
	tests := []struct {
		name, path string
		store      spool.Store
		want       string // empty: unreadable
	}{
		{"spool file", onDisk, store, "from the spool"},
		{"spool file, no store", onDisk, nil, "from the spool"},
		{"in the store", backends.BodyRef("kept.1", "0123456789ab"), store, "from the outbox"},
		{"not in the store", backends.BodyRef("gone", "0123456789ab"), store, ""},
		{"a relay whose outbox keeps no bytes", backends.BodyRef("kept.1", "0123456789ab"), nil, ""},
		{"missing file", "20260101/0000/none.0123456789ab.eml", store, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := files.Unreadable()
			r, err := spool.NewBodies(files, tt.store).Open(tt.path)
			after, last := files.Unreadable()
			if tt.want == "" {
				if err == nil || after != before+1 || last.Path != tt.path && !strings.HasSuffix(last.Path, tt.path) {
					t.Fatalf("Open = %v, unreadable %d -> %d (%+v)", err, before, after, last)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if b, _ := io.ReadAll(r); string(b) != tt.want {
				t.Errorf("read %q, want %q", b, tt.want)
			}
			if after != before {
				t.Errorf("a readable message was counted unreadable")
			}
		})
	}
	if _, err := spool.NewBodies(files, store).Open(backends.BodyRef("gone", "0123456789ab")); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("the store's error is lost: %v", err)
	}
}
