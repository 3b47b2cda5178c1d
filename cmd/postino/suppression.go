package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/relay/admin"
)

// operatorFlag adds --operator: who makes the change, in the list's
// history.
func operatorFlag(fs *flag.FlagSet) *string {
	return fs.String("operator", "", "your name, which the list's history keeps with the change (default: $USER)")
}

// operatorName is the name --operator gives, else the user's.
func operatorName(flagged string) string {
	if flagged != "" {
		return flagged
	}
	return os.Getenv("USER")
}

// filterFlags adds --prefix and --reason.
func filterFlags(fs *flag.FlagSet) (prefix, reason *string) {
	return fs.String("prefix", "", "list only the addresses that start with this (its domain in any case)"),
		fs.String("reason", "", "list only the entries of this reason: hard_bounce, complaint, unsubscribe, manual or import")
}

func suppressionList(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	asJSON := jsonFlag(fs)
	prefix, reason := filterFlags(fs)
	limit := fs.Int("limit", 50, "list at most `n` entries")
	after := fs.String("after", "", "list the page after the one that said (more: --after CURSOR)")
	c, _, err := inv.client(fs)
	if err != nil {
		return err
	}
	page, err := c.ListSuppressions(ctx, admin.SuppressionFilter{Prefix: *prefix, Reason: *reason, After: *after, Limit: *limit})
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(inv.stdout, page)
	}
	counts, err := c.SuppressionCounts(ctx)
	if err != nil {
		return err
	}
	if len(page.Entries) == 0 {
		fmt.Fprintln(inv.stdout, "no entry matches")
	} else {
		tw := tabwriter.NewWriter(inv.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ADDRESS\tSCOPE\tREASON\tSINCE\tEXPIRES\tBY")
		for _, e := range page.Entries {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Address, e.Scope, e.Reason, localTime(e.Created), localTime(e.Expires), e.ChangedBy)
		}
		tw.Flush()
	}
	if page.Next != "" {
		fmt.Fprintf(inv.stdout, "(more: --after %s)\n", page.Next)
	}
	line := fmt.Sprintf("the list holds %d entries", counts.Total)
	sep := ": "
	for _, r := range backends.SuppressionReasons() {
		if n := counts.Counts[r]; n > 0 {
			line += fmt.Sprintf("%s%s %d", sep, r, n)
			sep = ", "
		}
	}
	_, err = fmt.Fprintln(inv.stdout, line)
	return err
}

// localTime shows a time in the machine's zone; the zero time is none.
func localTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

func suppressionShow(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	asJSON := jsonFlag(fs)
	c, args, err := inv.client(fs, "ADDRESS")
	if err != nil {
		return err
	}
	d, err := c.Suppression(ctx, args[0])
	return answer(inv.stdout, *asJSON, d, err, func() error { return printSuppression(inv.stdout, d) })
}

func printSuppression(w io.Writer, d admin.SuppressionDetail) error {
	if len(d.Entries) == 0 {
		fmt.Fprintf(w, "%s is not on the suppression list\n", d.Address)
	} else {
		fmt.Fprintf(w, "%s (matched as %s):\n", d.Address, d.Key)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  SCOPE\tREASON\tSTATE\tSINCE\tEXPIRES\tBY\tEVIDENCE")
		for _, e := range d.Entries {
			state := "active"
			if !e.Active {
				state = fmt.Sprintf("%d strikes, not active yet", e.Strikes)
			}
			evidence := strings.TrimSpace(strings.Join([]string{e.Code, e.Diagnostic, e.MessageID}, " "))
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Scope, e.Reason, state, localTime(e.Created), localTime(e.Expires),
				e.ChangedBy, shorten(evidence, 80))
		}
		tw.Flush()
	}
	if len(d.History) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nHistory:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, h := range d.History {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", localTime(h.At), h.Action, h.Scope, h.Reason, h.By, shorten(h.Note, 80))
	}
	return tw.Flush()
}

func suppressionAdd(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	asJSON := jsonFlag(fs)
	scope := fs.String("scope", "", "the stream the entry blocks (default: every stream)")
	reason := fs.String("reason", "manual", "why the address is suppressed: hard_bounce, complaint, unsubscribe, manual or import")
	expires := fs.String("expires", "", "end the entry at a time (RFC 3339, or a date) or after a duration (720h, 90d) (default: never)")
	note := fs.String("note", "", "why, for the list's history")
	op := operatorFlag(fs)
	c, args, err := inv.client(fs, "ADDRESS")
	if err != nil {
		return err
	}
	s := admin.NewSuppression{Address: args[0], Scope: *scope, Reason: *reason, Note: *note}
	if s.Expires, err = parseExpires(*expires, time.Now()); err != nil {
		return fmt.Errorf("%w: %s: %v", errUsage, inv.cmd.name, err)
	}
	c.Operator = operatorName(*op)
	added, err := c.Suppress(ctx, s)
	return answer(inv.stdout, *asJSON, added, err, func() error {
		e := added.Entry
		what := fmt.Sprintf("%s is suppressed for %s since %s (%s)", e.Address, scopeText(e.Scope), localTime(e.Created), e.Reason)
		if !e.Expires.IsZero() {
			what += ", until " + localTime(e.Expires)
		}
		if !added.Added {
			what += " already: its entry stays as it was; remove it first to change it"
		}
		_, err := fmt.Fprintln(inv.stdout, what)
		return err
	})
}

func scopeText(scope string) string {
	if scope == backends.ScopeAll || scope == "" {
		return "every stream"
	}
	return "stream " + scope
}

// parseExpires reads --expires: a time, or a duration from now, which
// may count days (90d).
func parseExpires(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339, time.DateOnly} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n > 0 {
			return now.AddDate(0, 0, n), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(d), nil
	}
	return time.Time{}, fmt.Errorf("--expires %q: give an RFC 3339 time (2026-06-01T00:00:00Z), a date (2026-06-01) "+
		"or a duration from now (720h, 90d)", s)
}

func suppressionRemove(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	asJSON := jsonFlag(fs)
	scope := fs.String("scope", "", "the stream of the entry to remove (default: the entry that blocks every stream)")
	note := fs.String("note", "", "why, for the list's history")
	op := operatorFlag(fs)
	c, args, err := inv.client(fs, "ADDRESS")
	if err != nil {
		return err
	}
	c.Operator = operatorName(*op)
	removed, err := c.Unsuppress(ctx, args[0], *scope, *note)
	return answer(inv.stdout, *asJSON, removed, err, func() error {
		_, err := fmt.Fprintf(inv.stdout, "%s is off the suppression list for %s\n", removed.Address, scopeText(removed.Scope))
		return err
	})
}

func suppressionImport(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	asJSON := jsonFlag(fs)
	op := operatorFlag(fs)
	scope := fs.String("scope", "", "the `stream` of the unsubscribes and complaints whose lines name none (an ESP's export: the stream they unsubscribed from); without it such a line is refused")
	c, args, err := inv.client(fs, "FILE")
	if err != nil {
		return err
	}
	in := io.Reader(os.Stdin)
	if args[0] != "-" {
		f, err := os.Open(args[0])
		if err != nil {
			return fmt.Errorf("cannot read the file to import: %w", err)
		}
		defer f.Close()
		in = f
	}
	c.Operator = operatorName(*op)
	res, err := c.ImportSuppressions(ctx, in, *scope)
	return answer(inv.stdout, *asJSON, res, err, func() error {
		_, err := fmt.Fprintf(inv.stdout, "imported %d entries\n", res.Imported)
		return err
	})
}

// exported is what export --json says of the file it wrote.
type exported struct {
	File    string `json:"file"`
	Entries int    `json:"entries"`
}

func suppressionExport(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	asJSON := jsonFlag(fs)
	prefix, reason := filterFlags(fs)
	c, args, err := inv.client(fs, "[FILE]")
	if err != nil {
		return err
	}
	filter := admin.SuppressionFilter{Prefix: *prefix, Reason: *reason}
	if len(args) == 0 || args[0] == "-" {
		if *asJSON {
			return fmt.Errorf("%w: %s: --json says what was written to a FILE: name one, or leave --json out to have the CSV here", errUsage, inv.cmd.name)
		}
		return c.ExportSuppressions(ctx, inv.stdout, filter)
	}
	path := args[0]
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("cannot write the export: %w", err)
	}
	lines := &lineCounter{w: f}
	err = c.ExportSuppressions(ctx, lines, filter)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// Half a list would pass for the whole.
		return errors.Join(err, os.Remove(path))
	}
	out := exported{File: path, Entries: max(lines.n-1, 0)}
	return answer(inv.stdout, *asJSON, out, nil, func() error {
		_, err := fmt.Fprintf(inv.stdout, "wrote %d entries to %s\n", out.Entries, out.File)
		return err
	})
}

// lineCounter counts the lines written through it: an entry a line, after
// the header (no field of an entry holds a line end).
type lineCounter struct {
	w io.Writer
	n int
}

func (l *lineCounter) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	l.n += bytes.Count(p[:n], []byte{'\n'})
	return n, err
}

func suppressionCheck(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	asJSON := jsonFlag(fs)
	stream := fs.String("stream", "", "the stream of the mail (default: transactional)")
	c, args, err := inv.client(fs, "ADDRESS")
	if err != nil {
		return err
	}
	res, err := c.CheckSuppression(ctx, args[0], *stream)
	return answer(inv.stdout, *asJSON, res, err, func() error {
		if !res.Blocked {
			_, err := fmt.Fprintf(inv.stdout, "mail of stream %s to %s goes out: no entry of the list holds it back\n", res.Stream, res.Address)
			return err
		}
		fmt.Fprintf(inv.stdout, "mail of stream %s to %s is held back:\n", res.Stream, res.Address)
		for _, why := range res.Why {
			fmt.Fprintf(inv.stdout, "  %s\n", why)
		}
		_, err := fmt.Fprintf(inv.stdout, "'postino suppression show %s' shows the entries and their history\n", res.Address)
		return err
	})
}
