package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/bounce"
)

func bounceParse(_ context.Context, inv *invocation) error {
	stdout, stderr := inv.stdout, inv.stderr
	fs := inv.flags()
	asJSON := fs.Bool("json", false, "print one JSON object per file, for scripts")
	configPath := configFlag(fs, " whose routes' bounce addresses are recognised (VERP)")
	files, err := inv.parse(fs)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("%w: bounce parse needs at least one FILE to read", errUsage)
	}
	cfg, err := relay.LoadConfig(*configPath, os.Environ())
	if err != nil {
		return err
	}
	opts := bounce.Options{BounceAddresses: cfg.BounceAddresses()}
	failed := 0
	for i, name := range files {
		rep, err := parseFile(name, opts)
		if err != nil {
			fmt.Fprintf(stderr, "postino: %s: %v\n", name, err)
			failed++
			continue
		}
		if *asJSON {
			b, _ := json.Marshal(struct {
				File string `json:"file"`
				*bounce.Report
			}{name, rep})
			fmt.Fprintf(stdout, "%s\n", b)
			continue
		}
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		printReport(stdout, name, rep)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d files could not be read", failed, len(files))
	}
	return nil
}

func parseFile(name string, opts bounce.Options) (*bounce.Report, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return bounce.Parse(f, opts)
}

func printReport(w io.Writer, name string, r *bounce.Report) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("File", name)
	row("Kind", string(r.Kind))
	row("Feedback type", r.FeedbackType)
	row("Reporting MTA", r.ReportingMTA)
	if !r.ArrivalDate.IsZero() {
		row("Arrival date", r.ArrivalDate.Format(time.RFC1123Z))
	}
	row("Message-ID", r.MessageID)
	keys := []string{}
	for _, k := range []struct{ name, v string }{{"X-Genro-Mail-ID", r.Keys.MailID}, {"VERP", r.Keys.VERP},
		{"Message-ID", r.Keys.MessageID}, {"ENVID", r.Keys.EnvID}} {
		if k.v != "" {
			keys = append(keys, k.name+" "+k.v)
		}
	}
	if len(keys) == 0 {
		keys = []string{"none: the relay cannot tell which message this is about"}
	}
	row("Keys", strings.Join(keys, "; "))
	tw.Flush()
	if len(r.Recipients) == 0 {
		return
	}
	fmt.Fprintln(w, "Recipients:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  RECIPIENT\tACTION\tSTATUS\tCODE\tVERDICT\tREASON\tREMOTE MTA\tDIAGNOSTIC")
	for _, rc := range r.Recipients {
		code := ""
		if rc.SMTPCode != 0 {
			code = fmt.Sprint(rc.SMTPCode)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", rc.FinalRecipient, rc.Action, rc.Status, code, rc.Verdict, rc.Reason,
			rc.RemoteMTA, shorten(rc.Diagnostic, 100))
	}
	tw.Flush()
}
