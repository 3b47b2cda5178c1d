package suppression

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/text"
)

// The columns WriteCSV writes, in order; ReadCSV reads them back.
var csvColumns = []string{"address", "scope", "reason", "created", "expires"}

// Limits of an import.
const (
	// DefaultMaxCSVBytes bounds a file ReadCSV reads.
	DefaultMaxCSVBytes = 200 << 20
	// MaxCSVLine bounds a line, and a record: an address is at most 320
	// characters, and the columns an ESP's export adds are short.
	MaxCSVLine = 64 << 10
	// maxLineErrors is how many bad lines an error lists.
	maxLineErrors = 20
)

// ErrCSVTooLarge is the error of a file past its limit.
var ErrCSVTooLarge = errors.New("the file is larger than an import takes")

// CSVImport reads a file of entries to import.
type CSVImport struct {
	// MaxBytes bounds the file; 0 is DefaultMaxCSVBytes.
	MaxBytes int64
	// Scope is the stream of the lines of a reason that concerns one
	// stream (an unsubscribe, a complaint) that name none. Without it such
	// a line is refused: an ESP's unsubscribes must not hold back password
	// resets. Lines of the other reasons that name none are of every
	// stream.
	Scope string
}

// ReadCSV reads a file of entries with the default limits.
func ReadCSV(r io.Reader, now time.Time) ([]backends.Suppression, error) {
	return CSVImport{}.Read(r, now)
}

// Read reads a whole file of entries and checks each, as
// backends.PrepareImport does: the file is taken whole or not at all, so
// a bad line is an error, which lists every bad line (up to 20) by its
// number (a *CSVError). The first line names the columns, in any order:
// ours (address, scope, reason, created, expires) or those of an ESP's
// export (csvRoles). A file of addresses alone, one a line, needs none.
// An entry without a scope blocks every stream; one without a reason, or
// with a reason that is not known, is an import; one without a time was
// made at now.
func (c CSVImport) Read(r io.Reader, now time.Time) ([]backends.Suppression, error) {
	var entries []backends.Suppression
	err := c.Each(r, now, func(e backends.Suppression) error {
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return entries, nil
}

// Each reads a file as Read does and hands fn its entries one at a time,
// in the file's order, until a line is bad: an importer that must take
// the file whole reads it once to check it (fn doing nothing), then again
// to write it, holding a few of its entries at once rather than all of
// them. An error of fn stops the reading and is returned.
func (c CSVImport) Each(r io.Reader, now time.Time, fn func(backends.Suppression) error) error {
	limit := c.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxCSVBytes
	}
	br := bufio.NewReaderSize(&boundedReader{r: r, max: limit, line: 1}, 64<<10)
	if bom, _ := br.Peek(3); string(bom) == "\uFEFF" {
		br.Discard(3) // a spreadsheet's byte order mark
	}
	cr := csv.NewReader(br)
	cr.Comma = guessComma(br)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	cr.TrimLeadingSpace = true
	bad := &CSVError{}
	head, err := cr.Read()
	if err == io.EOF {
		return errors.New("the file is empty: give a header line (address,scope,reason,created,expires) and an entry a line")
	}
	if err != nil {
		return csvFailed(bad, err)
	}
	cols, headerless := csvHeader(head)
	if cols.address < 0 {
		bad.add(1, "the first line names no address column: name the columns (address,scope,reason,created,expires, "+
			"or an ESP export's: EmailAddress, Email, Recipient…), or give one address a line")
		return bad
	}
	end := cr.InputOffset()
	if headerless {
		e, err := cols.entry(head, c.Scope, now)
		if err != nil {
			bad.add(1, err.Error())
		} else if err := fn(e); err != nil {
			return err
		}
	}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return csvFailed(bad, err)
		}
		line, _ := cr.FieldPos(0)
		size := cr.InputOffset() - end
		end = cr.InputOffset()
		switch {
		case size > MaxCSVLine:
			// Lines of a quoted field that holds line ends.
			bad.add(line, fmt.Sprintf("the record is longer than %d bytes", MaxCSVLine))
			continue
		case len(rec) != cols.fields:
			bad.add(line, fmt.Sprintf("%d fields, where the first line has %d: quote a field that holds a %q", len(rec), cols.fields, cr.Comma))
			continue
		}
		e, err := cols.entry(rec, c.Scope, now)
		if err != nil {
			bad.add(line, err.Error())
			continue
		}
		if len(bad.Lines) == 0 {
			if err := fn(e); err != nil {
				return err
			}
		}
	}
	if len(bad.Lines) > 0 {
		return bad
	}
	return nil
}

// csvFailed is the error of a file that cannot be read further: its
// size, or a line that is not CSV, added to the bad lines before it.
func csvFailed(bad *CSVError, err error) error {
	var pe *csv.ParseError
	var long *lineTooLong
	switch {
	case errors.Is(err, ErrCSVTooLarge):
		return err
	case errors.As(err, &long):
		bad.add(long.line, fmt.Sprintf("%v; the lines after it were not read", err))
	case errors.As(err, &pe):
		bad.add(pe.StartLine, fmt.Sprintf("not CSV (%v); the lines after it were not read", pe.Err))
	default:
		return fmt.Errorf("read the file: %w", err)
	}
	return bad
}

// CSVError lists the bad lines of a file.
type CSVError struct {
	Lines []LineError `json:"lines"`
	// More counts the bad lines past those listed.
	More int `json:"more,omitempty"`
}

// LineError is what is wrong with a line.
type LineError struct {
	Line  int    `json:"line"`
	Error string `json:"error"`
}

func (e *CSVError) add(line int, msg string) {
	if len(e.Lines) == maxLineErrors {
		e.More++
		return
	}
	e.Lines = append(e.Lines, LineError{Line: line, Error: msg})
}

func (e *CSVError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the file was not imported, nothing of it: %d bad lines; correct them and import it again:", len(e.Lines)+e.More)
	for _, l := range e.Lines {
		fmt.Fprintf(&b, "\n  line %d: %s", l.Line, l.Error)
	}
	if e.More > 0 {
		fmt.Fprintf(&b, "\n  and %d more", e.More)
	}
	return b.String()
}

// Column roles.
const (
	roleAddress = iota + 1
	roleScope
	roleReason
	roleCreated
	roleExpires
)

// csvRoles names, by header (in lower case, letters and digits only),
// what a column holds: ours, and those of the exports of Amazon SES
// (EmailAddress, Reason, LastUpdateTime), Postmark (Email or Recipient,
// Reason or SuppressionReason, CreatedAt), SendGrid (email, created in
// unix seconds, reason, status), Mailgun (address, code, error,
// created_at) and Mailchimp (Email Address, UNSUB_TIME, CLEAN_TIME).
var csvRoles = map[string]int{
	"address": roleAddress, "emailaddress": roleAddress, "email": roleAddress, "recipient": roleAddress,
	"scope":  roleScope,
	"reason": roleReason, "suppressionreason": roleReason, "type": roleReason,
	"status": roleReason, "code": roleReason, "error": roleReason,
	"created": roleCreated, "createdat": roleCreated, "lastupdatetime": roleCreated, "timestamp": roleCreated,
	"unsubtime": roleCreated, "cleantime": roleCreated,
	"expires": roleExpires, "expiresat": roleExpires,
}

// csvImplied is the reason of the entries of a file with such a column
// and no reason of their own: Mailchimp's exports of unsubscribed and of
// cleaned (hard bounced) addresses.
var csvImplied = map[string]backends.SuppressionReason{
	"unsubtime": backends.ReasonUnsubscribe,
	"cleantime": backends.ReasonHardBounce,
}

// csvReasons maps the reasons of the exports, in lower case, letters
// only, to ours.
var csvReasons = map[string]backends.SuppressionReason{
	"hardbounce": backends.ReasonHardBounce, "bounce": backends.ReasonHardBounce, "bounced": backends.ReasonHardBounce,
	"bounces": backends.ReasonHardBounce, "hard": backends.ReasonHardBounce,
	"complaint": backends.ReasonComplaint, "complaints": backends.ReasonComplaint, "spamcomplaint": backends.ReasonComplaint,
	"spamreport": backends.ReasonComplaint, "spam": backends.ReasonComplaint, "abuse": backends.ReasonComplaint,
	"unsubscribe": backends.ReasonUnsubscribe, "unsubscribed": backends.ReasonUnsubscribe, "unsub": backends.ReasonUnsubscribe,
	"optout": backends.ReasonUnsubscribe, "optedout": backends.ReasonUnsubscribe,
	"manual": backends.ReasonManual, "manualsuppression": backends.ReasonManual,
	"import": backends.ReasonImport, "imported": backends.ReasonImport,
}

// csvColumnsOf is where each role is in a file's records.
type csvColumnsOf struct {
	address, scope, created, expires int
	reasons                          []int
	implied                          backends.SuppressionReason
	fields                           int
}

// csvHeader reads the first record: the columns' names, or, when it is a
// lone address, the first entry of a file of addresses.
func csvHeader(head []string) (csvColumnsOf, bool) {
	cols := csvColumnsOf{address: -1, scope: -1, created: -1, expires: -1, fields: len(head), implied: backends.ReasonImport}
	if len(head) == 1 {
		if _, err := backends.SuppressionKey(head[0]); err == nil {
			cols.address = 0
			return cols, true
		}
	}
	for i, h := range head {
		name := headerName(h)
		if r, ok := csvImplied[name]; ok {
			cols.implied = r
		}
		switch csvRoles[name] {
		case roleAddress:
			cols.address = first(cols.address, i)
		case roleScope:
			cols.scope = first(cols.scope, i)
		case roleCreated:
			cols.created = first(cols.created, i)
		case roleExpires:
			cols.expires = first(cols.expires, i)
		case roleReason:
			cols.reasons = append(cols.reasons, i)
		}
	}
	return cols, false
}

func first(cur, i int) int {
	if cur >= 0 {
		return cur
	}
	return i
}

// headerName is a column's name in lower case, letters and digits only.
func headerName(h string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return -1
	}, h)
}

// entry makes the entry of a record, checked.
func (c *csvColumnsOf) entry(rec []string, scope string, now time.Time) (backends.Suppression, error) {
	field := func(i int) string {
		if i < 0 {
			return ""
		}
		return strings.TrimSpace(rec[i])
	}
	e := backends.Suppression{Scope: backends.ScopeAll, Reason: c.reason(rec)}
	if e.Reason == backends.ReasonUnsubscribe || e.Reason == backends.ReasonComplaint {
		e.Scope = cmp.Or(scope, backends.ScopeAll)
	}
	// Cloned: a record's fields share one string, the whole line's.
	e.Address = strings.Clone(strings.TrimSuffix(strings.TrimPrefix(field(c.address), "<"), ">"))
	if s := field(c.scope); s != "" && s != backends.ScopeAll {
		e.Scope = strings.Clone(s)
	}
	var err error
	if e.Created, err = parseTime(field(c.created)); err != nil {
		return e, fmt.Errorf("created: %w", err)
	}
	if e.Created.IsZero() {
		e.Created = now
	}
	if e.Expires, err = parseTime(field(c.expires)); err != nil {
		return e, fmt.Errorf("expires: %w", err)
	}
	if !e.Expires.IsZero() && !e.Expires.After(e.Created) {
		return e, fmt.Errorf("expires %s is not after created %s: leave it empty for an entry that does not expire",
			e.Expires.Format(time.RFC3339), e.Created.Format(time.RFC3339))
	}
	if err := e.Check(); err != nil {
		return e, err
	}
	if e.Scope == backends.ScopeAll && (e.Reason == backends.ReasonUnsubscribe || e.Reason == backends.ReasonComplaint) && field(c.scope) == "" {
		return e, fmt.Errorf("an entry of reason %s concerns one stream, and the line names none: add a scope column, or import with --scope STREAM (scope=STREAM in the API)", e.Reason)
	}
	if e.Key == e.Address {
		e.Address = e.Key // one string for the two
	}
	return e, nil
}

// reason is the first of the record's reason columns that names a known
// reason, or an SMTP reply of a permanent failure (a hard bounce).
func (c *csvColumnsOf) reason(rec []string) backends.SuppressionReason {
	for _, i := range c.reasons {
		v := strings.TrimSpace(rec[i])
		if r, ok := csvReasons[headerName(v)]; ok {
			return r
		}
		if permanentReply(v) {
			return backends.ReasonHardBounce
		}
	}
	return c.implied
}

// permanentReply reports whether s starts with a 5xx reply code or a
// 5.x.x enhanced status code.
func permanentReply(s string) bool {
	digit := func(i int) bool { return i < len(s) && s[i] >= '0' && s[i] <= '9' }
	return len(s) >= 3 && s[0] == '5' && (digit(1) && digit(2) && !digit(3) || s[1] == '.' && digit(2))
}

// timeLayouts are the times a file may give, besides unix seconds; those
// without a zone are UTC.
var timeLayouts = []string{time.RFC3339, time.RFC1123, time.RFC1123Z, time.DateTime, "2006-01-02 15:04:05Z07:00",
	"2006-01-02 15:04:05 -0700", time.DateOnly}

// maxUnix is the last second of year 9999.
const maxUnix = 253402300799

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if strings.Trim(s, "0123456789") == "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n > maxUnix {
			return time.Time{}, fmt.Errorf("%q is past year 9999 as unix seconds (milliseconds?): give seconds", s)
		}
		return time.Unix(n, 0).UTC(), nil
	}
	for _, layout := range timeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time: give RFC 3339 (2006-01-02T15:04:05Z), RFC 1123, "+
		"2006-01-02 15:04:05 (UTC) or unix seconds", shorten(s, 40))
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return text.Cut(s, n) + "…"
}

// guessComma picks the separator of the first line: a comma, or the
// semicolon or tab of a spreadsheet's export, whichever it has most of.
func guessComma(br *bufio.Reader) rune {
	head, _ := br.Peek(MaxCSVLine)
	if i := bytes.IndexByte(head, '\n'); i >= 0 {
		head = head[:i]
	}
	comma, n := ',', bytes.Count(head, []byte{','})
	for _, c := range []rune{';', '\t'} {
		if m := bytes.Count(head, []byte{byte(c)}); m > n {
			comma, n = c, m
		}
	}
	return comma
}

// lineTooLong is the error of a line longer than MaxCSVLine.
type lineTooLong struct{ line int }

func (e *lineTooLong) Error() string {
	return fmt.Sprintf("the line is longer than %d bytes", MaxCSVLine)
}

// boundedReader stops a file at its size limit, and at a line longer than
// MaxCSVLine, which encoding/csv would gather whole.
type boundedReader struct {
	r    io.Reader
	max  int64
	n    int64
	run  int // bytes since the last line end
	line int // the number of the line being read
}

func (b *boundedReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	if b.n > b.max {
		return 0, fmt.Errorf("%w (%d MiB): split it, and import each part", ErrCSVTooLarge, b.max>>20)
	}
	for chunk := p[:n]; len(chunk) > 0; {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			i = len(chunk)
		}
		if b.run += i; b.run > MaxCSVLine {
			return 0, &lineTooLong{line: b.line}
		}
		if i == len(chunk) {
			break
		}
		b.run, b.line, chunk = 0, b.line+1, chunk[i+1:]
	}
	return n, err
}

// WriteCSV writes entries as ReadCSV reads them: a header line, then an
// entry a line, times in RFC 3339, UTC.
func WriteCSV(w io.Writer, entries iter.Seq2[backends.Suppression, error]) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvColumns); err != nil {
		return err
	}
	rec := make([]string, len(csvColumns))
	for e, err := range entries {
		if err != nil {
			return err
		}
		rec[0], rec[1], rec[2], rec[3], rec[4] = e.Address, e.Scope, string(e.Reason), e.Created.UTC().Format(time.RFC3339), ""
		if !e.Expires.IsZero() {
			rec[4] = e.Expires.UTC().Format(time.RFC3339)
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// Lister lists the entries of the list a page at a time.
type Lister interface {
	ListSuppressions(ctx context.Context, q backends.SuppressionQuery) ([]backends.Suppression, string, error)
}

// exportPage is the size of the pages All reads.
const exportPage = 1000

// All yields the active entries q selects, reading them a page at a time.
func All(ctx context.Context, l Lister, q backends.SuppressionQuery) iter.Seq2[backends.Suppression, error] {
	if q.Limit <= 0 {
		q.Limit = exportPage
	}
	return func(yield func(backends.Suppression, error) bool) {
		for {
			page, next, err := l.ListSuppressions(ctx, q)
			if err != nil {
				yield(backends.Suppression{}, err)
				return
			}
			for _, e := range page {
				if !yield(e, nil) {
					return
				}
			}
			if next == "" {
				return
			}
			q.After = next
		}
	}
}
