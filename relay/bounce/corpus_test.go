package bounce

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/genropy/postino/internal/corpus"
)

// sisimaiReasons maps sisimai's reason names onto Postino's, by what a
// user would do about each. The special names feedback, vacation and
// delivered are not reasons but kinds of message; they are judged by kind
// and action instead (see TestCorpus).
var sisimaiReasons = map[string]Reason{
	"userunknown": ReasonUserUnknown,
	// The mailbox moved with no forwarding address: the address is dead.
	"hasmoved":    ReasonUserUnknown,
	"hostunknown": ReasonDomainNotFound,
	// The domain takes no mail at all (null MX, no MX nor A).
	"notaccept":   ReasonDomainNotFound,
	"suspend":     ReasonMailboxDisabled,
	"mailboxfull": ReasonMailboxFull,
	"mesgtoobig":  ReasonTooLarge,
	// sisimai's exceedlimit is a message over the mailbox's size limit.
	"exceedlimit":   ReasonTooLarge,
	"spamdetected":  ReasonSpam,
	"virusdetected": ReasonVirus,
	// Refused for its headers or format, not as spam: the receiver's rules.
	"contenterror":  ReasonPolicy,
	"blocked":       ReasonBlocked,
	"badreputation": ReasonBlocked,
	"requireptr":    ReasonBlocked,
	// sisimai's rejected is the sender address refused: the sender is blocked.
	"rejected":        ReasonBlocked,
	"authfailure":     ReasonAuthentication,
	"policyviolation": ReasonPolicy,
	"norelaying":      ReasonPolicy,
	"notcompliantrfc": ReasonPolicy,
	// A security or policy refusal (5.7.x) sisimai could not narrow down.
	"securityerror": ReasonPolicy,
	// sisimai's filtered is a recipient refused at DATA time or by its
	// own filter; nearly every such row of the corpus reads "User
	// unknown", and the user's move is to drop the address.
	"filtered":     ReasonUserUnknown,
	"toomanyconn":  ReasonRateLimited,
	"speeding":     ReasonRateLimited,
	"expired":      ReasonExpired,
	"networkerror": ReasonNetwork,
	// TLS could not be set up with the receiver: a transport problem.
	"failedstarttls": ReasonNetwork,
	"systemerror":    ReasonSystem,
	"systemfull":     ReasonSystem,
	"mailererror":    ReasonSystem,
	// A malformed command in the SMTP session: nothing the user can act on.
	"syntaxerror": ReasonOther,
	// sisimai could not tell.
	"onhold":    ReasonOther,
	"undefined": ReasonOther,
}

// delayNotices are the corpus messages that say delivery is still being
// tried, found by reading them: expected.tsv has no action column. A
// report of failed and delayed recipients together (rfc3464-35) is a
// bounce.
var delayNotices = map[string]bool{
	"lhost-exim-38.eml":            true,
	"lhost-exim-41.eml":            true,
	"lhost-gmail-06.eml":           true,
	"lhost-gmail-08.eml":           true,
	"lhost-gmail-09.eml":           true,
	"lhost-gmail-17.eml":           true,
	"lhost-messagingserver-07.eml": true,
	"lhost-opensmtpd-04.eml":       true,
	"lhost-opensmtpd-06.eml":       true,
	"lhost-opensmtpd-12.eml":       true,
	"lhost-opensmtpd-13.eml":       true,
	"lhost-opensmtpd-15.eml":       true,
	"lhost-opensmtpd-16.eml":       true,
	"lhost-outlook-06.eml":         true,
	"lhost-sendmail-29.eml":        true,
	"lhost-sendmail-55.eml":        true,
	"lhost-x1-04.eml":              true,
	"lhost-zoho-04.eml":            true,
	"rfc3464-07.eml":               true,
	"rfc3464-09.eml":               true,
	"rfc3464-34.eml":               true,
	"rfc3464-55.eml":               true,
	"rhost-gsuite-06.eml":          true,
	"rhost-outlook-06.eml":         true,
}

type expectedRow struct {
	file   string
	pos    int // 1-based position in Report.Recipients
	status string
	code   int
	reason string
	hard   bool
}

func readExpected(t *testing.T, path string) []expectedRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []expectedRow
	used := map[string]map[int]bool{}
	sc := bufio.NewScanner(f)
	for n := 0; sc.Scan(); n++ {
		cols := strings.Split(sc.Text(), "\t")
		if n == 0 || len(cols) < 6 {
			continue
		}
		idx, err := strconv.Atoi(cols[1])
		if err != nil {
			t.Fatalf("expected.tsv line %d: %v", n+1, err)
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
		rows = append(rows, expectedRow{file: cols[0], pos: idx, status: cols[2], code: code, reason: cols[4], hard: cols[5] == "true"})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// expectedKind is what a corpus file is, from its name and its rows.
func expectedKind(file string, rows []expectedRow) Kind {
	switch {
	case strings.HasPrefix(file, "arf-"):
		return KindComplaint
	case strings.HasPrefix(file, "rfc3834-"):
		return KindAutoReply
	case delayNotices[file]:
		return KindDelay
	}
	delivered := len(rows) > 0
	for _, r := range rows {
		switch r.reason {
		case "feedback":
			return KindComplaint
		case "vacation":
			return KindAutoReply
		}
		if r.reason != "delivered" {
			delivered = false
		}
	}
	if delivered {
		return KindNotBounce
	}
	return KindBounce
}

// pseudoStatus reports whether s is one of sisimai's internal codes
// (x.0.9yy), which it makes up from its reason when a bounce has no code
// of its own, or only a generic x.0.0; sisimai's own IsExplicit calls them
// "not explicit". Such codes are never in the message.
func pseudoStatus(s string) bool {
	return len(s) == 7 && s[1:5] == ".0.9"
}

// TestCorpus reads every message of the shared corpus and measures how
// often Postino agrees with sisimai's reading in expected.tsv.
//
// Percentages are over all the rows of expected.tsv (626), one row per
// recipient sisimai found. A row whose recipient Postino did not find at
// that position counts as a disagreement for every field. Rows whose
// expected status is empty (complaints and auto-replies, which carry no
// code) count as equal when Postino reports no status either. Rows whose
// expected status is one of sisimai's internal codes (see pseudoStatus)
// count as equal when Postino reports no code or only a generic x.0.0:
// Postino keeps codes as written and invents none. Reasons compare after
// sisimaiReasons; the rows named feedback and vacation compare the kind of
// the report (complaint, auto-reply), and delivered rows the recipient's
// action.
func TestCorpus(t *testing.T) {
	corpusDir := corpus.Dir(t, "bounces-sisimai")
	rows := readExpected(t, filepath.Join(corpusDir, "expected.tsv"))
	byFile := map[string][]expectedRow{}
	for _, r := range rows {
		byFile[r.file] = append(byFile[r.file], r)
	}

	files, err := filepath.Glob(filepath.Join(corpusDir, "*.eml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no .eml file in the corpus")
	}

	// Parse in parallel: the reader shares no state, and the race
	// detector gets to check that it does not.
	parsed := make([]*Report, len(files))
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, path := range files {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			parsed[i], errs[i] = parseFile(path)
		}()
	}
	wg.Wait()

	reports := map[string]*Report{}
	kindsEqual := 0
	var disagree []string
	for i, path := range files {
		name := filepath.Base(path)
		rep, err := parsed[i], errs[i]
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		reports[name] = rep
		if want := expectedKind(name, byFile[name]); rep.Kind == want {
			kindsEqual++
		} else {
			disagree = append(disagree, fmt.Sprintf("%s\t-\tkind\t%s\t%s", name, want, rep.Kind))
		}
	}

	var found, statusEqual, reasonEqual int
	for _, row := range rows {
		rep := reports[row.file]
		var got *Recipient
		if rep != nil && row.pos <= len(rep.Recipients) && rep.Recipients[row.pos-1].FinalRecipient != "" {
			got = &rep.Recipients[row.pos-1]
		}
		if got == nil {
			disagree = append(disagree, fmt.Sprintf("%s\t%d\trecipient\tfound\tnone", row.file, row.pos))
			continue
		}
		found++

		switch {
		case got.Status == row.status,
			pseudoStatus(row.status) && (got.Status == "" || strings.HasSuffix(got.Status, ".0.0")):
			statusEqual++
		default:
			disagree = append(disagree, fmt.Sprintf("%s\t%d\tstatus\t%s\t%s", row.file, row.pos, row.status, got.Status))
		}

		var ok bool
		var want string
		switch row.reason {
		case "feedback":
			ok, want = rep.Kind == KindComplaint, "kind "+string(KindComplaint)
		case "vacation":
			ok, want = rep.Kind == KindAutoReply, "kind "+string(KindAutoReply)
		case "delivered":
			ok, want = got.Action == "delivered" || got.Action == "relayed" || got.Action == "expanded", "action delivered"
		default:
			r, known := sisimaiReasons[row.reason]
			if !known {
				t.Errorf("%s: sisimai reason %q has no mapping", row.file, row.reason)
			}
			ok, want = got.Reason == r, string(r)+" ("+row.reason+")"
		}
		if ok {
			reasonEqual++
		} else {
			disagree = append(disagree, fmt.Sprintf("%s\t%d\treason\t%s\t%s [%s %d %q]", row.file, row.pos, want, got.Reason, got.Status, got.SMTPCode, truncate(got.Diagnostic, 160)))
		}
	}

	pct := func(n, of int) float64 { return 100 * float64(n) / float64(of) }
	sort.Strings(disagree)
	t.Logf("disagreements (file, index, field, expected, got):\n%s", strings.Join(disagree, "\n"))
	t.Logf("corpus: %d files, %d expected rows", len(files), len(rows))
	t.Logf("recipients found:     %4d/%d = %5.1f%%", found, len(rows), pct(found, len(rows)))
	t.Logf("status codes equal:   %4d/%d = %5.1f%%", statusEqual, len(rows), pct(statusEqual, len(rows)))
	t.Logf("reasons equal:        %4d/%d = %5.1f%%", reasonEqual, len(rows), pct(reasonEqual, len(rows)))
	t.Logf("kinds equal:          %4d/%d = %5.1f%%", kindsEqual, len(files), pct(kindsEqual, len(files)))

	if p := pct(found, len(rows)); p < 95 {
		t.Errorf("recipients found %.1f%% < 95%%", p)
	}
	if p := pct(statusEqual, len(rows)); p < 95 {
		t.Errorf("status codes equal %.1f%% < 95%%", p)
	}
	if p := pct(reasonEqual, len(rows)); p < 90 {
		t.Errorf("reasons equal %.1f%% < 90%%", p)
	}
}

// parseFile parses one file, turning a panic into an error naming it.
func parseFile(path string) (rep *Report, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return Parse(f, Options{})
}
