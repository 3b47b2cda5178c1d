package bounce_test

import (
	"os"
	"strings"
	"testing"

	"github.com/genropy/postino/internal/testrig/corpus"
	"github.com/genropy/postino/relay/bounce"
	"github.com/genropy/postino/relay/bounce/bouncescore"
)

// TestCorpus reads every message of the shared sisimai corpus and holds
// the reader's agreement with sisimai's reading to floors; go run
// ./contrib/bench/bouncescore prints the same figures.
func TestCorpus(t *testing.T) {
	res, err := bouncescore.Score(corpus.Dir(t, "bounces-sisimai"), func(path string) (*bounce.Report, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return bounce.Parse(f, bounce.Options{})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("disagreements (file, index, field, expected, got):\n%s", strings.Join(res.Disagreements, "\n"))
	t.Logf("\n%s", res.Summary())
	for _, e := range res.Errors {
		t.Error(e)
	}
	if len(res.Unmapped) > 0 {
		t.Errorf("sisimai reasons without a mapping in reasons.tsv: %v", res.Unmapped)
	}
	// The reasons' floor is below the 91 % of old on purpose: a failure
	// after temporary replies is expired, which sisimai calls by the last
	// reply (mailboxfull, systemerror, networkerror) on 16 rows. Hard or
	// soft is compared on the bounce rows but sisimai's filtered and
	// suspend, which it defines otherwise (docs/benchmarks.md).
	for _, f := range []struct {
		name  string
		n, of int
		floor float64
	}{
		{"recipients found", res.Found, res.Rows, 95}, {"status codes equal", res.Status, res.Rows, 95},
		{"hard or soft equal", res.Hard, res.HardRows, 95}, {"reasons equal", res.Reasons, res.Rows, 89},
	} {
		if p := bouncescore.Percent(f.n, f.of); p < f.floor {
			t.Errorf("%s %.1f%% < %.0f%%", f.name, p, f.floor)
		}
	}
	// A reason that blames the sender, the content or the moment is never
	// hard, by Postino's reading of any report, nor on a row sisimai gives
	// such a reason, but where sisimai misreads the report.
	for _, l := range res.HardOnSoft {
		t.Errorf("hard with a soft reason: %s", l)
	}
	for _, l := range res.HardOnSoftRows {
		file, _, _ := strings.Cut(l, "\t")
		if sisimaiMisreads[file] == "" {
			t.Errorf("hard where sisimai's reason is soft: %s", l)
		}
	}
	// No report names a recipient beyond those sisimai lists for it.
	for _, l := range res.FalseRecipients {
		t.Errorf("false recipient: %s", l)
	}
}

// sisimaiMisreads are the files where sisimai's reason of a row contradicts
// the report, and why.
var sisimaiMisreads = map[string]string{
	"rfc3464-01.eml": "the delivery-status part says 5.1.1 User Unknown for its one recipient; sisimai takes " +
		"mailboxfull from the text part's \"Not enough disk space\", written of another address (<nekochan>)",
}
