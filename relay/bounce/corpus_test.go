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
	// reply (mailboxfull, systemerror, networkerror) on 16 rows. So is
	// hard or soft's, below the 87 % of old: filtered (user unknown),
	// suspend and expired are hard here, since an app should stop sending
	// to those addresses, where sisimai says soft (docs/benchmarks.md).
	for _, f := range []struct {
		name  string
		n     int
		floor float64
	}{{"recipients found", res.Found, 95}, {"status codes equal", res.Status, 95}, {"hard or soft equal", res.Hard, 77}, {"reasons equal", res.Reasons, 89}} {
		if p := bouncescore.Percent(f.n, res.Rows); p < f.floor {
			t.Errorf("%s %.1f%% < %.0f%%", f.name, p, f.floor)
		}
	}
}
