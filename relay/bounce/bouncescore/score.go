// Package bouncescore measures how often the bounce reader agrees with
// sisimai's reading of the shared sisimai corpus (expected.tsv): the
// recipient, the status code, hard or soft, and the reason, this last
// through the mapping in reasons.tsv. contrib/bench/bouncescore prints it;
// relay/bounce's TestCorpus holds it to its floors.
package bouncescore

import (
	"bufio"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/genropy/postino/outcome"
	"github.com/genropy/postino/relay/bounce"
)

//go:embed reasons.tsv
var reasonsTSV string

// Reasons returns the mapping of sisimai's reason names onto Postino's.
func Reasons() map[string]bounce.Reason {
	m := map[string]bounce.Reason{}
	for _, l := range strings.Split(reasonsTSV, "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		cols := strings.Split(l, "\t")
		m[cols[0]] = bounce.Reason(cols[1])
	}
	return m
}

// delayNotices are the corpus messages that say delivery is still being
// tried, found by reading them: expected.tsv has no action column. A
// report of failed and delayed recipients together (rfc3464-35) is a
// bounce.
var delayNotices = map[string]bool{
	"lhost-exim-38.eml": true, "lhost-exim-41.eml": true, "lhost-gmail-06.eml": true,
	"lhost-gmail-08.eml": true, "lhost-gmail-09.eml": true, "lhost-gmail-17.eml": true,
	"lhost-messagingserver-07.eml": true, "lhost-opensmtpd-04.eml": true, "lhost-opensmtpd-06.eml": true,
	"lhost-opensmtpd-12.eml": true, "lhost-opensmtpd-13.eml": true, "lhost-opensmtpd-15.eml": true,
	"lhost-opensmtpd-16.eml": true, "lhost-outlook-06.eml": true, "lhost-sendmail-29.eml": true,
	"lhost-sendmail-55.eml": true, "lhost-x1-04.eml": true, "lhost-zoho-04.eml": true,
	"rfc3464-07.eml": true, "rfc3464-09.eml": true, "rfc3464-34.eml": true,
	"rfc3464-55.eml": true, "rhost-gsuite-06.eml": true, "rhost-outlook-06.eml": true,
}

// Row is one row of expected.tsv: one recipient sisimai found.
type Row struct {
	File   string
	Pos    int // 1-based position in Report.Recipients
	Status string
	Code   int
	Reason string
	Hard   bool
}

// ReadExpected reads expected.tsv.
func ReadExpected(path string) ([]Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []Row
	used := map[string]map[int]bool{}
	sc := bufio.NewScanner(f)
	for n := 0; sc.Scan(); n++ {
		cols := strings.Split(sc.Text(), "\t")
		if n == 0 || len(cols) < 6 {
			continue
		}
		idx, err := strconv.Atoi(cols[1])
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, n+1, err)
		}
		// Two files repeat an index; their rows are taken in order, the
		// repeated one at the next free position.
		if used[cols[0]] == nil {
			used[cols[0]] = map[int]bool{}
		}
		for used[cols[0]][idx] {
			idx++
		}
		used[cols[0]][idx] = true
		code, _ := strconv.Atoi(cols[3])
		rows = append(rows, Row{File: cols[0], Pos: idx, Status: cols[2], Code: code, Reason: cols[4], Hard: cols[5] == "true"})
	}
	return rows, sc.Err()
}

// expectedKind is what a corpus file is, from its name and its rows.
func expectedKind(file string, rows []Row) bounce.Kind {
	switch {
	case strings.HasPrefix(file, "arf-"):
		return bounce.KindComplaint
	case strings.HasPrefix(file, "rfc3834-"):
		return bounce.KindAutoReply
	case delayNotices[file]:
		return bounce.KindDelay
	}
	delivered := len(rows) > 0
	for _, r := range rows {
		switch r.Reason {
		case "feedback":
			return bounce.KindComplaint
		case "vacation":
			return bounce.KindAutoReply
		}
		if r.Reason != "delivered" {
			delivered = false
		}
	}
	if delivered {
		return bounce.KindNotBounce
	}
	return bounce.KindBounce
}

// pseudoStatus reports whether s is one of sisimai's internal codes
// (x.0.9yy), which it makes up from its reason when a bounce has no code
// of its own, or only a generic x.0.0; sisimai's own IsExplicit calls them
// "not explicit". Such codes are never in the message.
func pseudoStatus(s string) bool {
	return len(s) == 7 && s[1:5] == ".0.9"
}

// Result is the agreement over the corpus. Rows, Found, Status and
// Reasons count expected rows; HardRows and Hard the bounce rows hard or
// soft is compared on (see Score); Files and Kinds count messages.
type Result struct {
	Files, Kinds                 int
	Rows, Found, Status, Reasons int
	HardRows, Hard               int
	// HardOnSoft are the recipients given a hard verdict with a reason of
	// SoftReasons, of any file: "file, index, reason" lines.
	HardOnSoft []string
	// HardOnSoftRows are the rows whose sisimai reason maps to one of
	// SoftReasons and whose recipient the reader calls hard: "file,
	// index, reason (sisimai's), got" lines.
	HardOnSoftRows []string
	// FalseRecipients are the recipients the reader reports beyond those
	// sisimai lists for a file: "file: n recipients, sisimai lists m"
	// lines. The corpus has no envelope; this is its proxy for an address
	// a bounce names that the message was not sent to.
	FalseRecipients []string
	// Disagreements are "file, index, field, expected, got" lines, sorted.
	Disagreements []string
	// Errors are the files the reader refused or failed on.
	Errors []string
	// Unmapped are sisimai reasons reasons.tsv does not name.
	Unmapped []string
}

// SoftReasons are the reasons that never make an address hard: they say
// the message or the sender was refused, or the moment was wrong, not that
// the address cannot receive mail.
var SoftReasons = []bounce.Reason{
	bounce.ReasonExpired, bounce.ReasonNetwork, bounce.ReasonBlocked, bounce.ReasonPolicy,
	bounce.ReasonSpam, bounce.ReasonRateLimited, bounce.ReasonMailboxFull,
}

// uncompared are sisimai's reasons of the rows hard or soft is not
// compared on: filtered and suspend, which sisimai defines otherwise (a
// user unknown at the end of DATA, a disabled account: soft for sisimai),
// and the rows that are no bounce (complaints, auto-replies, deliveries).
var uncompared = map[string]bool{"filtered": true, "suspend": true, "feedback": true, "vacation": true, "delivered": true}

// Score reads every message of the corpus in dir with parse and compares
// the reports with expected.tsv.
//
// Every figure but hard or soft is over all the rows of expected.tsv, one
// row per recipient sisimai found. A row whose recipient the reader did
// not find at that position counts as a disagreement for every field. Rows
// whose expected status is empty (complaints and auto-replies, which carry
// no code) count as equal when the reader reports no status either. Rows
// whose expected status is one of sisimai's internal codes (see
// pseudoStatus) count as equal when the reader reports no code or only a
// generic x.0.0: Postino keeps codes as written and invents none. Hard or
// soft is compared on the bounce rows only, leaving out sisimai's
// filtered and suspend (see uncompared): equal when sisimai's hard_bounce
// is true exactly when the recipient's verdict is hard. Reasons compare
// after reasons.tsv; the rows named feedback and vacation compare the
// kind of the report (complaint, auto-reply), and delivered rows the
// recipient's action.
func Score(dir string, parse func(path string) (*bounce.Report, error)) (*Result, error) {
	rows, err := ReadExpected(filepath.Join(dir, "expected.tsv"))
	if err != nil {
		return nil, fmt.Errorf("read sisimai's expected readings: %w", err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.eml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no .eml file in %s: is it the bounces-sisimai corpus?", dir)
	}
	reports := parseAll(files, parse)
	byFile := map[string][]Row{}
	for _, r := range rows {
		byFile[r.File] = append(byFile[r.File], r)
	}
	res := &Result{Files: len(files), Rows: len(rows)}
	for _, path := range files {
		name := filepath.Base(path)
		p := reports[name]
		if p.err != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", name, p.err))
			continue
		}
		if want := expectedKind(name, byFile[name]); p.rep.Kind == want {
			res.Kinds++
		} else {
			res.disagree(name, 0, "kind", string(want), string(p.rep.Kind))
		}
	}
	mapping := Reasons()
	for _, row := range rows {
		res.compare(row, reports[row.File].rep, mapping)
	}
	for _, path := range files {
		name := filepath.Base(path)
		rep := reports[name].rep
		if rep == nil {
			continue
		}
		for i, rc := range rep.Recipients {
			if rc.Verdict == outcome.VerdictHard && slices.Contains(SoftReasons, rc.Reason) {
				res.HardOnSoft = append(res.HardOnSoft, fmt.Sprintf("%s\t%d\t%s", name, i+1, rc.Reason))
			}
		}
		if n := len(byFile[name]); n > 0 && len(rep.Recipients) > n {
			res.FalseRecipients = append(res.FalseRecipients, fmt.Sprintf("%s: %d recipients, sisimai lists %d", name, len(rep.Recipients), n))
		}
	}
	sort.Strings(res.Disagreements)
	sort.Strings(res.HardOnSoft)
	sort.Strings(res.HardOnSoftRows)
	sort.Strings(res.FalseRecipients)
	return res, nil
}

// compare counts what the reader's report agrees with of one row.
func (res *Result) compare(row Row, rep *bounce.Report, mapping map[string]bounce.Reason) {
	compareHard := !uncompared[row.Reason]
	if compareHard {
		res.HardRows++
	}
	if rep == nil || row.Pos > len(rep.Recipients) || rep.Recipients[row.Pos-1].FinalRecipient == "" {
		res.disagree(row.File, row.Pos, "recipient", "found", "none")
		return
	}
	res.Found++
	got := &rep.Recipients[row.Pos-1]
	if got.Status == row.Status || pseudoStatus(row.Status) && (got.Status == "" || strings.HasSuffix(got.Status, ".0.0")) {
		res.Status++
	} else {
		res.disagree(row.File, row.Pos, "status", row.Status, got.Status)
	}
	hard := got.Verdict == outcome.VerdictHard
	switch {
	case !compareHard:
	case row.Hard == hard:
		res.Hard++
	default:
		res.disagree(row.File, row.Pos, "hard", fmt.Sprintf("%t (%s)", row.Hard, row.Reason), fmt.Sprintf("%s [%s]", got.Verdict, got.Reason))
	}
	if hard && slices.Contains(SoftReasons, mapping[row.Reason]) {
		res.HardOnSoftRows = append(res.HardOnSoftRows, fmt.Sprintf("%s\t%d\t%s (%s)\thard [%s]", row.File, row.Pos, mapping[row.Reason], row.Reason, got.Reason))
	}
	ok, want := reasonAgrees(row, rep, got, mapping)
	if _, known := mapping[row.Reason]; !known && !ok && !slices.Contains(res.Unmapped, row.Reason) {
		res.Unmapped = append(res.Unmapped, row.Reason)
	}
	if ok {
		res.Reasons++
	} else {
		res.disagree(row.File, row.Pos, "reason", want, fmt.Sprintf("%s [%s %d %q]", got.Reason, got.Status, got.SMTPCode, short(got.Diagnostic)))
	}
}

// reasonAgrees tells whether the reader's reading of a row agrees with
// sisimai's reason, and says what was expected.
func reasonAgrees(row Row, rep *bounce.Report, got *bounce.Recipient, mapping map[string]bounce.Reason) (bool, string) {
	switch row.Reason {
	case "feedback":
		return rep.Kind == bounce.KindComplaint, "kind " + string(bounce.KindComplaint)
	case "vacation":
		return rep.Kind == bounce.KindAutoReply, "kind " + string(bounce.KindAutoReply)
	case "delivered":
		return got.Action == "delivered" || got.Action == "relayed" || got.Action == "expanded", "action delivered"
	}
	r, known := mapping[row.Reason]
	return known && got.Reason == r, string(r) + " (" + row.Reason + ")"
}

func (res *Result) disagree(file string, pos int, field, want, got string) {
	res.Disagreements = append(res.Disagreements, fmt.Sprintf("%s\t%d\t%s\t%s\t%s", file, pos, field, want, got))
}

// short cuts a diagnostic for a disagreement line.
func short(s string) string {
	if r := []rune(s); len(r) > 160 {
		return string(r[:160])
	}
	return s
}

type parsed struct {
	rep *bounce.Report
	err error
}

// parseAll parses the files in parallel, by base name; a panic is the
// file's error.
func parseAll(files []string, parse func(string) (*bounce.Report, error)) map[string]parsed {
	out := make([]parsed, len(files))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, path := range files {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			defer func() {
				if p := recover(); p != nil {
					out[i].err = fmt.Errorf("panic: %v", p)
				}
			}()
			out[i].rep, out[i].err = parse(path)
		})
	}
	wg.Wait()
	m := make(map[string]parsed, len(files))
	for i, path := range files {
		m[filepath.Base(path)] = out[i]
	}
	return m
}

// Percent is n of the whole as a percentage.
func Percent(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}

// Summary is the figures, one a line.
func (res *Result) Summary() string {
	var b strings.Builder
	line := func(name string, n, of int) {
		fmt.Fprintf(&b, "%-20s %4d/%d = %5.1f%%\n", name+":", n, of, Percent(n, of))
	}
	fmt.Fprintf(&b, "corpus: %d files, %d expected rows, %d unreadable\n", res.Files, res.Rows, len(res.Errors))
	line("recipients found", res.Found, res.Rows)
	line("status codes equal", res.Status, res.Rows)
	line("hard/soft equal", res.Hard, res.HardRows)
	fmt.Fprintf(&b, "%21s(of the bounce rows, leaving out sisimai's filtered and suspend: defined otherwise)\n", "")
	line("reasons equal", res.Reasons, res.Rows)
	line("kinds equal", res.Kinds, res.Files)
	fmt.Fprintf(&b, "%-20s %4d rows, %d recipients\n", "hard, reason soft:", len(res.HardOnSoftRows), len(res.HardOnSoft))
	fmt.Fprintf(&b, "%21s(rows by sisimai's reason, recipients by the reader's: %s)\n", "", strings.Join(reasonNames(SoftReasons), ", "))
	fmt.Fprintf(&b, "%-20s %4d\n", "false recipients:", len(res.FalseRecipients))
	fmt.Fprintf(&b, "%21s(recipients past those sisimai lists for a file: the corpus has no envelope)\n", "")
	return b.String()
}

func reasonNames(rs []bounce.Reason) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r)
	}
	return out
}
