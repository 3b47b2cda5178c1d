// Command bouncescore runs the bounce reader of `postino bounce parse` over
// the shared sisimai corpus and prints how often it agrees with sisimai's
// expected.tsv: recipients, status codes, hard or soft (over the bounce
// rows, leaving out sisimai's filtered and suspend), and reasons after the
// mapping in relay/bounce/bouncescore/reasons.tsv; then the hard verdicts
// given on a soft reason, and the false recipients. -v lists every
// disagreement as "file, index, field, expected, got", then the hard
// verdicts on a soft reason and the false recipients.
//
//	go run ./contrib/bench/bouncescore [-v] [-corpus DIR]
//
// The corpus is testdata/bounces-sisimai (make corpora), else
// ../shared/corpora/bounces-sisimai.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/genropy/postino/internal/testrig/corpus"
	"github.com/genropy/postino/relay/bounce"
	"github.com/genropy/postino/relay/bounce/bouncescore"
)

func main() {
	found, _ := corpus.Find("bounces-sisimai")
	dir := flag.String("corpus", found, "`folder` of the sisimai corpus and its expected.tsv (default: testdata/, else ../shared/corpora/)")
	verbose := flag.Bool("v", false, "list every disagreement")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "bouncescore: the sisimai corpus is in neither testdata/ nor ../shared/corpora/: run make corpora, or give -corpus")
		os.Exit(1)
	}
	res, err := bouncescore.Score(*dir, parse)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bouncescore: %v\n", err)
		os.Exit(1)
	}
	if *verbose {
		for _, part := range [][]string{res.Disagreements, res.HardOnSoftRows, res.HardOnSoft, res.FalseRecipients} {
			if len(part) > 0 {
				fmt.Println(strings.Join(part, "\n"))
				fmt.Println()
			}
		}
	}
	for _, e := range res.Errors {
		fmt.Fprintf(os.Stderr, "bouncescore: %s\n", e)
	}
	if len(res.Unmapped) > 0 {
		fmt.Fprintf(os.Stderr, "bouncescore: sisimai reasons not in reasons.tsv: %s\n", strings.Join(res.Unmapped, ", "))
	}
	fmt.Print(res.Summary())
}

// parse reads a file as `postino bounce parse` does without a
// configuration: no route's bounce address to recognise.
func parse(path string) (*bounce.Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return bounce.Parse(f, bounce.Options{})
}
