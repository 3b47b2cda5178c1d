package main

import (
	"context"
	"crypto/rsa"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/dkim"
)

// dkimKeygen writes a new key and prints the record to publish, alone on
// standard output so that it can go straight into a zone file.
func dkimKeygen(_ context.Context, inv *invocation) error {
	stdout, stderr := inv.stdout, inv.stderr
	fs := inv.flags()
	domain := fs.String("domain", "", "the signing `domain`")
	selector := fs.String("selector", "", "the `selector` to publish the key under, for example s2026")
	algorithm := fs.String("algorithm", "rsa", "rsa or ed25519 (RFC 8463; sign with both for receivers that lack it)")
	bits := fs.Int("bits", 0, "RSA key size in `bits` (2048 when 0)")
	out := fs.String("out", "", "`directory` to write the key into")
	if _, err := inv.parseArgs(fs); err != nil {
		return err
	}
	if err := required(fs, "domain", "selector", "out"); err != nil {
		return fmt.Errorf("%w: dkim keygen %w", errUsage, err)
	}
	d, err := dkim.Domain(*domain)
	if err != nil {
		return err
	}
	key, err := dkim.GenerateKey(*algorithm, *bits)
	if err != nil {
		return err
	}
	record, err := dkim.Record(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o700); err != nil {
		return err
	}
	path := filepath.Join(*out, d+"."+*selector+".pem")
	if err := dkim.WriteKey(path, key); err != nil {
		return err
	}
	size := "Ed25519"
	if k, ok := key.(*rsa.PrivateKey); ok {
		size = fmt.Sprintf("RSA %d bits", k.N.BitLen())
	}
	fmt.Fprintf(stderr, `Wrote %s (%s, mode 0600).
Publish the TXT record on standard output: it is a zone file line; in a DNS
provider's form the name is %s and the value the quoted strings joined.
Once it resolves:
  postino dkim check --domain %s --selector %s --key %s
then sign with it: --dkim %s=%s:%s, or dkim.keys in the config (SIGHUP reloads).
`, path, size, dkim.RecordName(d, *selector), d, *selector, path, d, *selector, path)
	fmt.Fprintln(stdout, dkim.ZoneLine(d, *selector, record))
	return nil
}

// dkimCheck looks up the record of each key chosen and says whether it
// verifies the key's signatures; with --eml it verifies the signatures of
// a signed message instead. --record stands in for DNS, so that both can be
// tried before the record is published.
func dkimCheck(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	domain := fs.String("domain", "", "check the keys of this `domain` (all when empty)")
	selector := fs.String("selector", "", "check the key of this `selector` (all when empty)")
	keyFile := fs.String("key", "", "check this key `file` instead of the configured keys (needs --domain and --selector); "+
		"with --eml, verify with its public half")
	configPath := configFlag(fs, " whose dkim.keys are checked")
	dkimKeys := dkimFlag(fs)
	resolver := fs.String("resolver", "", "ask this DNS server, `host:port`, instead of the system's (an authoritative server shows a record before it spreads)")
	eml := fs.String("eml", "", "verify the DKIM signatures of this signed message `file`, with the key of --record or --key, else the published records")
	record := fs.String("record", "", "use this key `record` instead of DNS: its value ('v=DKIM1; k=rsa; p=…') "+
		"or the zone file line dkim keygen printed, which answers for its own name only")
	if _, err := inv.parseArgs(fs); err != nil {
		return err
	}
	lookup, err := checkLookup(*record, *resolver)
	if err != nil {
		return err
	}
	if *eml != "" {
		if *domain != "" || *selector != "" || len(*dkimKeys) > 0 {
			return fmt.Errorf("%w: --eml verifies the signatures the message carries: leave out --domain, --selector and --dkim", errUsage)
		}
		return verifyMessage(ctx, inv.stdout, *eml, *keyFile, *record, lookup)
	}
	keys, err := keysToCheck(*keyFile, *configPath, *domain, *selector, *dkimKeys)
	if err != nil {
		return err
	}
	failed := 0
	for _, k := range keys {
		cctx, cancel := context.WithTimeout(ctx, dnsTimeout)
		err := dkim.Check(cctx, lookup, k)
		cancel()
		name := dkim.RecordName(k.Domain, k.Selector)
		if err != nil {
			fmt.Fprintf(inv.stdout, "FAIL  %s: %v\n", name, err)
			failed++
			continue
		}
		state := "active"
		if !k.Active {
			state = "inactive"
		}
		fmt.Fprintf(inv.stdout, "ok    %s matches %s (%s, %s)\n", name, k.File, k.Algorithm(), state)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d DKIM keys failed the check", failed, len(keys))
	}
	return nil
}

// dnsTimeout bounds the lookups of one check.
const dnsTimeout = 10 * time.Second

// checkLookup answers the record lookups: from the record given, or from
// DNS, through resolver when set.
func checkLookup(record, resolver string) (dkim.LookupTXT, error) {
	if record != "" {
		if resolver != "" {
			return nil, fmt.Errorf("%w: --record stands in for DNS: leave out --resolver", errUsage)
		}
		name, value, err := dkim.ParseRecord(record)
		if err != nil {
			return nil, fmt.Errorf("%w: --record: %w", errUsage, err)
		}
		return dkim.Given(name, value), nil
	}
	if resolver == "" {
		return net.DefaultResolver.LookupTXT, nil
	}
	res := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, resolver)
	}}
	return res.LookupTXT, nil
}

// verifyMessage verifies the signatures of the message in path and prints
// each verdict; it fails unless one verifies. The key is keyFile's public
// half when given, else what lookup answers.
func verifyMessage(ctx context.Context, stdout io.Writer, path, keyFile, record string, lookup dkim.LookupTXT) error {
	if keyFile != "" {
		if record != "" {
			return fmt.Errorf("%w: --eml takes the key from --record or from --key, not both", errUsage)
		}
		signer, err := dkim.LoadKey(keyFile)
		if err != nil {
			return err
		}
		value, err := dkim.Record(signer)
		if err != nil {
			return err
		}
		lookup = dkim.Given("", value)
	}
	msg, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, dnsTimeout)
	defer cancel()
	verifs, err := dkim.Verify(ctx, msg, lookup)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(verifs) == 0 {
		return fmt.Errorf("%s has no DKIM-Signature field: the relay signs a message as it leaves, for a domain it holds a key for", path)
	}
	passed := 0
	for _, v := range verifs {
		line := fmt.Sprintf("%-9s  d=%s s=%s", v.Result(), v.Domain, v.Selector)
		if v.Err != nil {
			line += ": " + v.Err.Error()
		} else {
			passed++
		}
		fmt.Fprintln(stdout, line)
	}
	if passed == 0 {
		return fmt.Errorf("none of the %d DKIM signatures of %s verifies", len(verifs), path)
	}
	return nil
}

// keysToCheck is the key file given, or the configured keys the filters
// keep.
func keysToCheck(keyFile, configPath, domain, selector string, extra []relay.DKIMKey) ([]*dkim.Key, error) {
	if keyFile != "" {
		if domain == "" || selector == "" {
			return nil, fmt.Errorf("%w: --key needs --domain and --selector", errUsage)
		}
		d, err := dkim.Domain(domain)
		if err != nil {
			return nil, err
		}
		signer, err := dkim.LoadKey(keyFile)
		if err != nil {
			return nil, err
		}
		return []*dkim.Key{{Domain: d, Selector: selector, File: keyFile, Active: true, Signer: signer}}, nil
	}
	cfg, err := relay.LoadConfig(configPath, os.Environ())
	if err != nil {
		return nil, err
	}
	cfg.DKIM.Keys = append(cfg.DKIM.Keys, extra...)
	ring, err := cfg.DKIM.Keyring()
	if err != nil {
		return nil, err
	}
	var keys []*dkim.Key
	for _, k := range ring.Keys() {
		if (domain == "" || ring.Key(domain, k.Selector) == k) && (selector == "" || k.Selector == selector) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("no configured DKIM key matches domain %q and selector %q: add one (--dkim, --config) or name a file with --key", domain, selector)
	}
	return keys, nil
}
