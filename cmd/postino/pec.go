package main

import (
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

func pecCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "parse" {
		return fmt.Errorf("%w: postino pec needs parse and one or more FILEs", errUsage)
	}
	fs := newFlagSet("pec parse", stdout)
	asJSON := fs.Bool("json", false, "print one JSON object per file, for scripts")
	configPath := fs.String("config", os.Getenv("POSTINO_CONFIG"), "YAML configuration `file` whose pec.trust_bundle checks the signatures")
	bundle := fs.String("trust-bundle", "", "check the S/MIME signatures against the authorities in this PEM `file`")
	files, err := parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("%w: postino pec parse needs at least one FILE", errUsage)
	}
	if *bundle == "" {
		cfg, err := relay.LoadConfig(*configPath, os.Environ())
		if err != nil {
			return err
		}
		*bundle = cfg.PEC.TrustBundle
	}
	var opts pec.Options
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
	sig := string(r.Signature.Status)
	if r.Signature.Signer != "" {
		sig += ", signed by " + r.Signature.Signer
	}
	if r.Signature.Error != "" {
		sig += ": " + r.Signature.Error
	}
	row("Signature", sig)
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
