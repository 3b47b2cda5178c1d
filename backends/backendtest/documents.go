package backendtest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

var documentTests = []test[backends.Documents]{
	{"Documents", testDocuments},
	{"DocumentsExpire", testDocumentsExpire},
}

func putDocument(t *testing.T, s backends.Documents, key, value string, expires time.Time) {
	t.Helper()
	if err := s.PutDocument(context.Background(), backends.Document{Key: key, Value: []byte(value), Expires: expires}); err != nil {
		t.Fatalf("PutDocument(%s): %v", key, err)
	}
}

func listDocuments(t *testing.T, s backends.Documents, prefix string) string {
	t.Helper()
	ds, err := s.ListDocuments(context.Background(), prefix)
	if err != nil {
		t.Fatalf("ListDocuments(%s): %v", prefix, err)
	}
	var out []string
	for _, d := range ds {
		out = append(out, d.Key+"="+string(d.Value))
	}
	return strings.Join(out, " ")
}

func testDocuments(t *testing.T, s backends.Documents) {
	ctx := context.Background()
	later := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	if _, err := s.GetDocument(ctx, "mta-sts/example.com"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("GetDocument of nothing: %v, want ErrNotFound", err)
	}
	big := bytes.Repeat([]byte("x"), backends.MaxDocument)
	if err := s.PutDocument(ctx, backends.Document{Key: "mta-sts/example.com", Value: big, Expires: later}); err != nil {
		t.Fatalf("PutDocument of MaxDocument bytes: %v", err)
	}
	if d, err := s.GetDocument(ctx, "mta-sts/example.com"); err != nil || !bytes.Equal(d.Value, big) || !d.Expires.Equal(later) {
		t.Errorf("GetDocument = %d bytes until %v, %v; want %d until %v", len(d.Value), d.Expires, err, len(big), later)
	}
	// Put again, a document is replaced, its expiry too.
	putDocument(t, s, "mta-sts/example.com", "v2", later.Add(time.Hour))
	if d, err := s.GetDocument(ctx, "mta-sts/example.com"); err != nil || string(d.Value) != "v2" || !d.Expires.Equal(later.Add(time.Hour)) || d.Key != "mta-sts/example.com" {
		t.Errorf("GetDocument after a second put = %+v, %v", d, err)
	}
	putDocument(t, s, "tlsrpt/2026-03-01/b.example/relay-1", "b1", later)
	putDocument(t, s, "tlsrpt/2026-03-01/a.example/relay-2", "a2", later)
	putDocument(t, s, "tlsrpt/2026-03-01/a.example/relay-1", "a1", later)
	putDocument(t, s, "tlsrpt/2026-03-02/a.example/relay-1", "next", later)
	putDocument(t, s, "tlsrpt/2026-03-01_a", "other", later)
	putDocument(t, s, "tlsrpt/2026-03-01%", "like", later)
	if got, want := listDocuments(t, s, "tlsrpt/2026-03-01/"), "tlsrpt/2026-03-01/a.example/relay-1=a1 tlsrpt/2026-03-01/a.example/relay-2=a2 tlsrpt/2026-03-01/b.example/relay-1=b1"; got != want {
		t.Errorf("ListDocuments by prefix:\n got %s\nwant %s", got, want)
	}
	// A prefix is bytes, not a pattern: _ and % match themselves.
	if got := listDocuments(t, s, "tlsrpt/2026-03-01_"); got != "tlsrpt/2026-03-01_a=other" {
		t.Errorf("ListDocuments(tlsrpt/2026-03-01_) = %s", got)
	}
	if got := listDocuments(t, s, "tlsrpt/2026-03-01%"); got != "tlsrpt/2026-03-01%=like" {
		t.Errorf("ListDocuments(tlsrpt/2026-03-01%%) = %s", got)
	}
	if got := listDocuments(t, s, "nothing/"); got != "" {
		t.Errorf("ListDocuments(nothing/) = %s", got)
	}
	for _, bad := range []backends.Document{
		{Key: "", Value: []byte("x"), Expires: later},
		{Key: strings.Repeat("k", 256), Expires: later},
		{Key: "big", Value: append(big, 'x'), Expires: later},
		{Key: "forever", Value: []byte("x")},
	} {
		if err := s.PutDocument(ctx, bad); err == nil {
			t.Errorf("PutDocument(%.20s…, %d bytes, %v) was accepted", bad.Key, len(bad.Value), bad.Expires)
		}
	}
}

func testDocumentsExpire(t *testing.T, s backends.Documents) {
	ctx := context.Background()
	past := time.Now().Add(-time.Minute)
	putDocument(t, s, "mta-sts/old.example", "old", past)
	putDocument(t, s, "mta-sts/new.example", "new", time.Now().Add(time.Hour))
	if _, err := s.GetDocument(ctx, "mta-sts/old.example"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("GetDocument of an expired document: %v, want ErrNotFound", err)
	}
	if got := listDocuments(t, s, "mta-sts/"); got != "mta-sts/new.example=new" {
		t.Errorf("ListDocuments with an expired document: %s", got)
	}
	// Put again with a later expiry, it is back.
	putDocument(t, s, "mta-sts/old.example", "again", time.Now().Add(time.Hour))
	if d, err := s.GetDocument(ctx, "mta-sts/old.example"); err != nil || string(d.Value) != "again" {
		t.Errorf("GetDocument of a document put again: %+v, %v", d, err)
	}
}
