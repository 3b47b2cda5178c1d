package suppression

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

var csvNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func readFixture(t *testing.T, name string) ([]backends.Suppression, error) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return ReadCSV(f, csvNow)
}

// row is what a test checks of an entry.
type row struct {
	address, key, scope string
	reason              backends.SuppressionReason
	created, expires    string
}

func rowOf(e backends.Suppression) row {
	r := row{e.Address, e.Key, e.Scope, e.Reason, e.Created.Format(time.RFC3339), ""}
	if !e.Expires.IsZero() {
		r.expires = e.Expires.Format(time.RFC3339)
	}
	return r
}

func TestReadCSV(t *testing.T) {
	now := csvNow.Format(time.RFC3339)
	tests := []struct {
		file string
		want []row
	}{
		{"postino.csv", []row{
			{"gone@example.com", "gone@example.com", "*", backends.ReasonHardBounce, "2026-01-02T03:04:05Z", ""},
			{"Angry@Example.COM", "Angry@example.com", "news", backends.ReasonComplaint, "2026-01-02T23:00:00Z", "2026-07-03T00:00:00Z"},
			{"left@example.org", "left@example.org", "news", backends.ReasonUnsubscribe, "2026-01-04T00:00:00Z", ""},
		}},
		{"reordered.csv", []row{
			{"first@example.com", "first@example.com", "*", backends.ReasonManual, now, ""},
			{"second@example.com", "second@example.com", "*", backends.ReasonImport, "2026-01-02T03:04:05Z", ""},
		}},
		{"ses.csv", []row{
			{"bounced@example.com", "bounced@example.com", "*", backends.ReasonHardBounce, "2026-01-02T03:04:05Z", ""},
			{"complained@example.com", "complained@example.com", "*", backends.ReasonComplaint, "2026-01-02T03:04:05Z", ""},
		}},
		{"postmark.csv", []row{
			{"hard@example.com", "hard@example.com", "*", backends.ReasonHardBounce, "2026-01-02T15:04:05Z", ""},
			{"spam@example.com", "spam@example.com", "*", backends.ReasonComplaint, "2026-01-02T15:04:05Z", ""},
			{"manual@example.com", "manual@example.com", "*", backends.ReasonManual, "2026-01-02T15:04:05Z", ""},
			{"unsub@example.com", "unsub@example.com", "*", backends.ReasonUnsubscribe, "2026-01-02T15:04:05Z", ""},
		}},
		{"sendgrid.csv", []row{
			{"bounce@example.com", "bounce@example.com", "*", backends.ReasonHardBounce, "2026-01-02T03:04:05Z", ""},
			{"odd@example.com", "odd@example.com", "*", backends.ReasonImport, "2026-01-02T03:04:05Z", ""},
		}},
		{"mailgun.csv", []row{
			{"gone@example.com", "gone@example.com", "*", backends.ReasonHardBounce, "2026-01-02T03:04:05Z", ""},
			{"later@example.com", "later@example.com", "*", backends.ReasonImport, "2026-01-02T03:04:05Z", ""},
		}},
		{"mailchimp.csv", []row{
			{"reader@example.com", "reader@example.com", "*", backends.ReasonUnsubscribe, "2026-01-02T03:04:05Z", ""},
		}},
		{"semicolon.csv", []row{
			{"semi@example.com", "semi@example.com", "news", backends.ReasonManual, now, ""},
		}},
		{"addresses.csv", []row{
			{"one@example.com", "one@example.com", "*", backends.ReasonImport, now, ""},
			{"two@Example.NET", "two@example.net", "*", backends.ReasonImport, now, ""},
			{"three@example.org", "three@example.org", "*", backends.ReasonImport, now, ""},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			entries, err := readFixture(t, tt.file)
			if err != nil {
				t.Fatal(err)
			}
			var got []row
			for _, e := range entries {
				got = append(got, rowOf(e))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got\n%v\nwant\n%v", got, tt.want)
			}
			// What the store is given: PrepareImport takes every entry.
			if err := backends.PrepareImport(entries, "operator test", csvNow); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestReadCSVBadLines: nothing of a file with bad lines is taken, and
// every bad line is named, with what is wrong.
func TestReadCSVBadLines(t *testing.T) {
	entries, err := readFixture(t, "bad.csv")
	var bad *CSVError
	if !errors.As(err, &bad) || entries != nil {
		t.Fatalf("entries %v, error %v; want a *CSVError and none", entries, err)
	}
	want := []struct {
		line int
		text string
	}{
		{3, `"not-an-address" is not an address`},
		{4, "stream name"},
		{5, `created: "yesterday" is not a time`},
		{6, "expires 2026-01-01T00:00:00Z is not after created"},
		{7, "6 fields, where the first line has 5"},
	}
	if len(bad.Lines) != len(want) {
		t.Fatalf("lines %+v", bad.Lines)
	}
	for i, w := range want {
		if l := bad.Lines[i]; l.Line != w.line || !strings.Contains(l.Error, w.text) {
			t.Errorf("bad line %d: %+v, want line %d with %q", i, l, w.line, w.text)
		}
	}
	if msg := err.Error(); !strings.Contains(msg, "nothing of it: 5 bad lines") || !strings.Contains(msg, "\n  line 3: ") {
		t.Errorf("error: %s", msg)
	}
}

func TestReadCSVErrorCap(t *testing.T) {
	var b strings.Builder
	b.WriteString("address\n")
	for range 25 {
		b.WriteString("nobody\n")
	}
	_, err := ReadCSV(strings.NewReader(b.String()), csvNow)
	var bad *CSVError
	if !errors.As(err, &bad) || len(bad.Lines) != 20 || bad.More != 5 || bad.Lines[19].Line != 21 ||
		!strings.HasSuffix(err.Error(), "\n  and 5 more") {
		t.Fatalf("error %v", err)
	}
}

func TestReadCSVRefuses(t *testing.T) {
	long := strings.Repeat("x", MaxCSVLine+10)
	tests := []struct {
		name, file string
		want       string
	}{
		{"empty", "", "the file is empty"},
		{"no address column", "name,reason\nx,manual\n", "line 1: the first line names no address column"},
		{"a long line", "address\na@example.com\n" + long + "@example.com\nb@example.com\n", "line 3: the line is longer than 65536 bytes"},
		{"a long record", "address,reason\na@example.com,\"" + strings.Repeat("x\n", MaxCSVLine) + "\"\n", "line 2: the record is longer"},
		{"not CSV", "address,reason\na@example.com,\"manual\nb@example.com,x\n", "line 2: not CSV"},
		{"a bare quote", "address\na\"b@example.com\n", "line 2: not CSV"},
		{"unix milliseconds", "address,created\na@example.com,1767323045000\n", "give seconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadCSV(strings.NewReader(tt.file), csvNow)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// endless yields the same line for ever.
type endless struct{ line []byte }

func (e endless) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		n += copy(p[n:], e.line)
	}
	return n, nil
}

func TestReadCSVSizeLimit(t *testing.T) {
	r := io.MultiReader(strings.NewReader("address\n"), endless{[]byte("someone@example.com\n")})
	_, err := CSVImport{MaxBytes: 1 << 20}.Read(r, csvNow)
	if !errors.Is(err, ErrCSVTooLarge) || !strings.Contains(err.Error(), "(1 MiB): split it") {
		t.Fatalf("error %v", err)
	}
}

// TestCSVRoundTrip: what WriteCSV writes, ReadCSV reads back the same,
// and the file has exactly our columns.
func TestCSVRoundTrip(t *testing.T) {
	in, err := readFixture(t, "postino.csv")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteCSV(&b, seqOf(in)); err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(b.String(), "\n")
	if first != "address,scope,reason,created,expires" {
		t.Errorf("header %q", first)
	}
	out, err := ReadCSV(&b, csvNow.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(in, out, func(a, b backends.Suppression) bool { return rowOf(a) == rowOf(b) }) {
		t.Errorf("read back\n%v\nwritten\n%v", out, in)
	}
}

func seqOf(entries []backends.Suppression) iter.Seq2[backends.Suppression, error] {
	return func(yield func(backends.Suppression, error) bool) {
		for _, e := range entries {
			if !yield(e, nil) {
				return
			}
		}
	}
}

// TestAllPages: All reads every active entry of the store, page by page,
// as the export does.
func TestAllPages(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	var entries []backends.Suppression
	for i := range 25 {
		entries = append(entries, backends.Suppression{Address: fmt.Sprintf("u%02d@example.com", i), Reason: backends.ReasonManual})
	}
	if err := backends.PrepareImport(entries, "test", csvNow); err != nil {
		t.Fatal(err)
	}
	if err := s.ImportSuppressions(ctx, entries, "test"); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteCSV(&b, All(ctx, s, backends.SuppressionQuery{Prefix: "u1", Limit: 3})); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 11 || !strings.HasPrefix(lines[1], "u10@example.com,*,manual,") || !strings.HasPrefix(lines[10], "u19@") {
		t.Errorf("export:\n%s", b.String())
	}
	failing := listerFunc(func(context.Context, backends.SuppressionQuery) ([]backends.Suppression, string, error) {
		return nil, "", errors.New("the store is down")
	})
	if err := WriteCSV(io.Discard, All(ctx, failing, backends.SuppressionQuery{})); err == nil || err.Error() != "the store is down" {
		t.Errorf("error %v", err)
	}
}

type listerFunc func(context.Context, backends.SuppressionQuery) ([]backends.Suppression, string, error)

func (f listerFunc) ListSuppressions(ctx context.Context, q backends.SuppressionQuery) ([]backends.Suppression, string, error) {
	return f(ctx, q)
}

// lines yields n lines of a file, made as they are read.
type lines struct {
	n, i int
	note string
	buf  []byte
}

func (l *lines) Read(p []byte) (int, error) {
	for len(l.buf) < len(p) && l.i < l.n {
		l.buf = fmt.Appendf(l.buf, "user%07d@Example.com,*,hard_bounce,2026-01-02T03:04:05Z,,%s\n", l.i, l.note)
		l.i++
	}
	if len(l.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, l.buf)
	l.buf = l.buf[:copy(l.buf, l.buf[n:])]
	return n, nil
}

// TestReadCSVMillion: a file of a million lines is read into entries
// alone, in memory proportionate to them.
func TestReadCSVMillion(t *testing.T) {
	if testing.Short() {
		t.Skip("a million lines")
	}
	const n = 1_000_000
	// A column that is not read, as an ESP's export has: the line, that
	// holds it, is not kept.
	r := io.MultiReader(strings.NewReader("address,scope,reason,created,expires,note\n"), &lines{n: n, note: strings.Repeat("x", 100)})
	start := time.Now()
	entries, err := ReadCSV(r, csvNow)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if len(entries) != n || entries[n-1].Key != "user0999999@example.com" {
		t.Fatalf("%d entries, the last %+v", len(entries), entries[len(entries)-1])
	}
	// An entry is its struct and its address: the line is not kept.
	perEntry := ms.HeapAlloc / n
	t.Logf("%d lines in %s, %d MiB in use, %d bytes an entry", n, took, ms.HeapAlloc>>20, perEntry)
	if perEntry > 400 {
		t.Errorf("%d bytes an entry: more than its struct and its address", perEntry)
	}
	runtime.KeepAlive(entries)
}

func FuzzReadCSV(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.csv"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("address\n\"a\"\"b\"@example.com\n"))
	f.Add([]byte("\xef\xbb\xbfemail\tcreated\nx@y.z\t1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := CSVImport{MaxBytes: 1 << 20}.Read(bytes.NewReader(b), csvNow)
		if err != nil {
			if entries != nil {
				t.Fatalf("entries with an error: %v", err)
			}
			return
		}
		// Whatever is read is what an import takes.
		if err := backends.PrepareImport(entries, "fuzz", csvNow); err != nil {
			t.Fatalf("read %d entries, PrepareImport refuses: %v", len(entries), err)
		}
	})
}
