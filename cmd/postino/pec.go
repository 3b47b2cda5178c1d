package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/pec"
)

func pecParse(_ context.Context, inv *invocation) error {
	stdout, stderr := inv.stdout, inv.stderr
	fs := inv.flags()
	asJSON := fs.Bool("json", false, "print one JSON object per file, for scripts")
	configPath := configFlag(fs, " whose pec.trust_bundle checks the signatures")
	bundle := fs.String("trust-bundle", "", "check the S/MIME signatures against the authorities in this PEM `file`")
	at := fs.String("at", "", "the `time` the receipt was received (RFC 3339, or a date YYYY-MM-DD): a certificate expired by then is reported; default now")
	files, err := inv.parse(fs)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("%w: pec parse needs at least one FILE to read", errUsage)
	}
	if *bundle == "" {
		cfg, err := relay.LoadConfig(*configPath, os.Environ())
		if err != nil {
			return err
		}
		*bundle = cfg.PEC.TrustBundle
	}
	var opts pec.Options
	if *at != "" {
		if opts.Now, err = parseAt(*at); err != nil {
			return err
		}
	}
	if *bundle != "" {
		if opts.Roots, err = pec.LoadTrustBundle(*bundle); err != nil {
			return err
		}
	}
	failed := 0
	for i, name := range files {
		raw, err := os.ReadFile(name)
		var rec *pec.Receipt
		if err == nil {
			rec, err = pec.Parse(raw, opts)
		}
		if err != nil {
			fmt.Fprintf(stderr, "postino: %s: %v\n", name, err)
			failed++
			continue
		}
		if *asJSON {
			b, _ := json.Marshal(struct {
				File string `json:"file"`
				*pec.Receipt
			}{name, rec})
			fmt.Fprintf(stdout, "%s\n", b)
			continue
		}
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		printReceipt(stdout, name, rec)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d files could not be read", failed, len(files))
	}
	return nil
}

// parseAt reads --at: an RFC 3339 time, or a date at midnight UTC.
func parseAt(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%w: --at %q is neither an RFC 3339 time (2024-05-01T10:00:00+02:00) nor a date (2024-05-01)", errUsage, v)
}

// signatureLine says in one line what the signature check found.
func signatureLine(s pec.Signature) string {
	line := string(s.Status)
	if s.Signer != "" {
		line += ", signed by " + s.Signer
	}
	if s.Error != "" {
		line += ": " + s.Error
	}
	if !s.SignedAt.IsZero() {
		line += ", judged at " + s.SignedAt.Format(time.RFC3339)
	}
	if t := s.CertificateExpired; !t.IsZero() {
		line += "; the certificate has since expired (" + t.Format(time.RFC3339) + "): an old receipt, not a forged one"
	}
	return line
}

func printReceipt(w io.Writer, name string, r *pec.Receipt) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	typ := string(r.Type)
	if typ == "" {
		typ = "none: not a PEC message"
	}
	row("File", name)
	row("Type", typ)
	row("Read from", string(r.Source))
	row("X-TipoRicevuta", r.TipoRicevuta)
	row("Subject", r.Subject)
	row("Message-ID", r.MessageID)
	if !r.Date.IsZero() {
		row("Date", r.Date.Format(time.RFC1123Z))
	}
	row("Signature", signatureLine(r.Signature))
	if w := r.WrappedIn; w != nil {
		row("Wrapped", w.String()+": the receipt and its signature are read inside it")
	}
	keys := []string{}
	for _, k := range []struct{ name, v string }{{"Message-ID", r.Keys.MessageID}, {"identificativo", r.Keys.Identificativo},
		{"X-Genro-Mail-ID", r.Keys.MailID}} {
		if k.v != "" {
			keys = append(keys, k.name+" "+k.v)
		}
	}
	if len(keys) == 0 {
		keys = []string{"none: the relay cannot tell which message this is about"}
	}
	row("Keys", strings.Join(keys, "; "))
	row("X-VerificaSicurezza", r.VerificaSicurezza)
	if r.MessageIDConflict != "" {
		row("X-Riferimento-Message-ID", r.MessageIDConflict+": not used, it disagrees with the signed daticert.xml")
	}
	if r.DaticertError != "" {
		row("daticert.xml", "not used: "+r.DaticertError)
	}
	if d := r.Daticert; d != nil {
		row("tipo", d.Tipo)
		row("errore", d.Errore)
		row("mittente", d.Mittente)
		for _, rc := range d.Destinatari {
			row("destinatari", fmt.Sprintf("%s (%s)", rc.Address, rc.Type))
		}
		row("risposte", d.Risposte)
		row("oggetto", d.Oggetto)
		row("gestore-emittente", d.GestoreEmittente)
		if !d.Data.IsZero() {
			row("data", d.Data.Format("2006-01-02 15:04:05 -0700"))
		}
		row("identificativo", d.Identificativo)
		row("msgid", d.MsgID)
		row("ricevuta", d.Ricevuta)
		row("consegna", d.Consegna)
		row("ricezione", d.Ricezione)
		row("errore-esteso", d.ErroreEsteso)
	}
	tw.Flush()
	if len(r.Fields) > 0 {
		names := make([]string, 0, len(r.Fields))
		for f := range r.Fields {
			names = append(names, f)
		}
		sort.Strings(names)
		parts := make([]string, len(names))
		for i, f := range names {
			parts[i] = f + "=" + string(r.Fields[f])
		}
		fmt.Fprintf(w, "Fields read from: %s\n", strings.Join(parts, ", "))
	}
}
