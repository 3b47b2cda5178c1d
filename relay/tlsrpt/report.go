package tlsrpt

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/http"
	"net/mail"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/genropy/postino/backends"
)

// Report is an aggregate report (RFC 8460 section 4.4).
type Report struct {
	Organization string         `json:"organization-name"`
	DateRange    DateRange      `json:"date-range"`
	Contact      string         `json:"contact-info"`
	ID           string         `json:"report-id"`
	Policies     []PolicyResult `json:"policies"`
}

// DateRange is the window a report covers.
type DateRange struct {
	Start time.Time `json:"start-datetime"`
	End   time.Time `json:"end-datetime"`
}

// sentPrefix names the reports sent among the store's documents, so that
// a relay taking over a window half reported does not send them again.
const sentPrefix = "tlsrpt/sent/"

// cursorName is the lease the reporting relay holds (backends.Cursors);
// its LastUID is the number of the last window reported, in periods
// since the epoch.
const cursorName = "tlsrpt"

// Options shape a Reporter.
type Options struct {
	// Organization and Contact name the reporter (organization-name,
	// contact-info); Contact is an address, the From of mailed reports.
	Organization, Contact string
	// Owner names this relay for the lease.
	Owner string
	// Period is a report's window: a day. Delay is how long after its end
	// the report goes out, so that every relay's counts are in the store.
	Period, Delay time.Duration
	// Lease is how long the reporting relay holds the turn.
	Lease time.Duration
	// Roots are the authorities an https: rua's certificate must chain
	// to; nil for the system's.
	Roots *x509.CertPool
	// Timeout bounds a POST.
	Timeout time.Duration
}

// Mailer hands a report mailed to a mailto: rua to the relay, to be
// delivered as its other mail is.
type Mailer interface {
	Mail(ctx context.Context, from string, to []string, msg []byte) error
}

// Resolver answers the _smtp._tls TXT question.
type Resolver interface {
	LookupTXT(ctx context.Context, name string) ([]string, error)
}

// ReportStore is what the reporter keeps in the store: the counts and
// what was sent, and the lease.
type ReportStore interface {
	Store
	ClaimCursor(ctx context.Context, name, owner string, until time.Time) (backends.Cursor, error)
	SaveCursor(ctx context.Context, name, owner string, c backends.Cursor) error
}

// Reporter sends the reports of the windows that ended, one relay of a
// fleet at a time.
type Reporter struct {
	opts   Options
	store  ReportStore
	tally  *Tally
	res    Resolver
	mail   Mailer
	client *http.Client
	log    *slog.Logger
	now    func() time.Time
}

// NewReporter sends the reports of the counts in store, this relay's
// tally flushed first.
func NewReporter(opts Options, store ReportStore, tally *Tally, res Resolver, mail Mailer, log *slog.Logger) *Reporter {
	return &Reporter{opts: opts, store: store, tally: tally, res: res, mail: mail, log: log, now: time.Now,
		client: &http.Client{Timeout: opts.Timeout,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: opts.Roots, MinVersion: tls.VersionTLS12}}}}
}

// Run reports every interval until ctx ends.
func (r *Reporter) Run(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if err := r.Once(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("tlsrpt: the TLS reports could not be made; tried again later", "error", err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// Once sends the reports of the last window whose delay has passed,
// unless they went out already: under the lease, so one relay does it.
func (r *Reporter) Once(ctx context.Context) error {
	now := r.now()
	last := now.Add(-r.opts.Delay).UTC().Truncate(r.opts.Period).Add(-r.opts.Period)
	n := uint32(last.Unix() / int64(r.opts.Period/time.Second))
	cur, err := r.store.ClaimCursor(ctx, cursorName, r.opts.Owner, now.Add(r.opts.Lease))
	if errors.Is(err, backends.ErrLockNotAcquired) {
		return nil
	}
	if err != nil {
		return err
	}
	if cur.LastUID >= n {
		return nil
	}
	if err := r.tally.Flush(ctx); err != nil {
		return fmt.Errorf("flush this relay's counts: %w", err)
	}
	if err := r.window(ctx, last); err != nil {
		return err
	}
	return r.store.SaveCursor(ctx, cursorName, r.opts.Owner, backends.Cursor{LastUID: n})
}

// window sends the reports of the window from start.
func (r *Reporter) window(ctx context.Context, start time.Time) error {
	prefix := countsPrefix + start.UTC().Format("20060102T150405Z") + "/"
	docs, err := r.store.ListDocuments(ctx, prefix)
	if err != nil {
		return err
	}
	byDomain := map[string]*counts{}
	for _, d := range docs {
		domain, _, _ := strings.Cut(strings.TrimPrefix(d.Key, prefix), "/")
		var c counts
		if err := json.Unmarshal(d.Value, &c); err != nil {
			r.log.Warn("tlsrpt: counts that cannot be read are left out", "key", d.Key, "error", err)
			continue
		}
		sum := byDomain[domain]
		if sum == nil {
			sum = &counts{}
			byDomain[domain] = sum
		}
		for _, p := range c.Policies {
			sum.add(p)
		}
	}
	for _, domain := range slices.Sorted(maps.Keys(byDomain)) {
		if err := r.domain(ctx, start, domain, byDomain[domain]); err != nil {
			if ctx.Err() != nil {
				return err
			}
			r.log.Warn("tlsrpt: the TLS report could not be sent", "domain", domain, "window", start, "error", err)
		}
	}
	return nil
}

// domain sends domain's report to each rua of its _smtp._tls record.
func (r *Reporter) domain(ctx context.Context, start time.Time, domain string, c *counts) error {
	sent := sentPrefix + start.UTC().Format("20060102T150405Z") + "/" + domain
	if _, err := r.store.GetDocument(ctx, sent); err == nil {
		return nil
	}
	ruas, err := r.ruas(ctx, domain)
	if err != nil || len(ruas) == 0 {
		return err
	}
	rep := Report{Organization: r.opts.Organization, Contact: r.opts.Contact,
		DateRange: DateRange{Start: start.UTC(), End: start.Add(r.opts.Period).UTC().Add(-time.Second)},
		ID:        start.UTC().Format("20060102T150405Z") + "_" + domain + "@" + r.opts.Owner,
		Policies:  c.Policies}
	body, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(body)
	if err := zw.Close(); err != nil {
		return err
	}
	var errs []error
	for _, rua := range ruas {
		if err := r.send(ctx, rua, domain, rep, gz.Bytes()); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", rua, err))
			continue
		}
		r.log.Info("tlsrpt: TLS report sent", "domain", domain, "rua", rua, "window", start.UTC())
	}
	if err := r.store.PutDocument(ctx, backends.Document{Key: sent, Value: []byte("sent"), Expires: start.Add(keep * r.opts.Period)}); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ruas are the addresses of domain's _smtp._tls record (section 3):
// "v=TLSRPTv1; rua=mailto:a@example.com,https://example.com/tls".
func (r *Reporter) ruas(ctx context.Context, domain string) ([]*url.URL, error) {
	txts, err := r.res.LookupTXT(ctx, "_smtp._tls."+domain)
	var de *net.DNSError
	if errors.As(err, &de) && de.IsNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*url.URL
	for _, t := range txts {
		fields := strings.Split(t, ";")
		if strings.TrimSpace(fields[0]) != "v=TLSRPTv1" {
			continue
		}
		for _, f := range fields[1:] {
			k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
			if k != "rua" {
				continue
			}
			for _, u := range strings.Split(v, ",") {
				if parsed, err := url.Parse(strings.TrimSpace(u)); err == nil && (parsed.Scheme == "mailto" || parsed.Scheme == "https") {
					out = append(out, parsed)
				}
			}
		}
	}
	return out, nil
}

// send sends a report to one rua: a POST of the gzip'd JSON to an https:
// one (section 5.2), a mail with it attached to a mailto: one (5.3).
func (r *Reporter) send(ctx context.Context, rua *url.URL, domain string, rep Report, gz []byte) error {
	if rua.Scheme == "https" {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, rua.String(), bytes.NewReader(gz))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/tlsrpt+gzip")
		resp, err := r.client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("status %s", resp.Status)
		}
		return nil
	}
	to, err := mail.ParseAddress(rua.Opaque)
	if err != nil {
		return fmt.Errorf("the rua's address: %w", err)
	}
	msg, err := r.message(to.Address, domain, rep, gz)
	if err != nil {
		return err
	}
	return r.mail.Mail(ctx, r.opts.Contact, []string{to.Address}, msg)
}

// message is the mail of a report (section 5.3): multipart/report of
// report-type tlsrpt, a few words, and the gzip'd JSON attached.
func (r *Reporter) message(to, domain string, rep Report, gz []byte) ([]byte, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	submitter := r.opts.Organization
	fmt.Fprintf(&buf, "From: %s\r\nTo: %s\r\nDate: %s\r\nSubject: Report Domain: %s Submitter: %s Report-ID: <%s>\r\n"+
		"TLS-Report-Domain: %s\r\nTLS-Report-Submitter: %s\r\nMIME-Version: 1.0\r\n"+
		"Content-Type: multipart/report; report-type=\"tlsrpt\"; boundary=\"%s\"\r\n\r\n",
		r.opts.Contact, to, r.now().UTC().Format(time.RFC1123Z), domain, submitter, rep.ID, domain, submitter, mw.Boundary())
	text, err := mw.CreatePart(textproto.MIMEHeader{"Content-Type": {"text/plain; charset=utf-8"}, "Content-Transfer-Encoding": {"quoted-printable"}})
	if err != nil {
		return nil, err
	}
	qp := quotedprintable.NewWriter(text)
	fmt.Fprintf(qp, "This is an aggregate TLS report (RFC 8460) from %s for %s, from %s to %s.\r\n",
		submitter, domain, rep.DateRange.Start.Format(time.RFC3339), rep.DateRange.End.Format(time.RFC3339))
	qp.Close()
	name := fmt.Sprintf("%s!%s!%d!%d.json.gz", submitter, domain, rep.DateRange.Start.Unix(), rep.DateRange.End.Unix())
	att, err := mw.CreatePart(textproto.MIMEHeader{"Content-Type": {"application/tlsrpt+gzip"}, "Content-Transfer-Encoding": {"base64"},
		"Content-Disposition": {fmt.Sprintf("attachment; filename=%q", name)}})
	if err != nil {
		return nil, err
	}
	if err := writeBase64(att, gz); err != nil {
		return nil, err
	}
	if err := mw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeBase64 writes b in base64, in lines of 76 characters.
func writeBase64(w io.Writer, b []byte) error {
	enc := base64.StdEncoding.EncodeToString(b)
	for len(enc) > 0 {
		n := min(76, len(enc))
		if _, err := io.WriteString(w, enc[:n]+"\r\n"); err != nil {
			return err
		}
		enc = enc[n:]
	}
	return nil
}
