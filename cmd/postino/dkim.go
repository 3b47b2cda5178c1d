package main

import (
	"context"
	"crypto/rsa"
	"fmt"
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
// verifies the key's signatures.
func dkimCheck(ctx context.Context, inv *invocation) error {
	stdout := inv.stdout
	fs := inv.flags()
	domain := fs.String("domain", "", "check the keys of this `domain` (all when empty)")
	selector := fs.String("selector", "", "check the key of this `selector` (all when empty)")
	keyFile := fs.String("key", "", "check this key `file` instead of the configured keys (needs --domain and --selector)")
	configPath := configFlag(fs, " whose dkim.keys are checked")
	dkimKeys := dkimFlag(fs)
	resolver := fs.String("resolver", "", "ask this DNS server, `host:port`, instead of the system's (an authoritative server shows a record before it spreads)")
	if _, err := inv.parseArgs(fs); err != nil {
		return err
	}
	keys, err := keysToCheck(*keyFile, *configPath, *domain, *selector, *dkimKeys)
	if err != nil {
		return err
	}
	res := net.DefaultResolver
	if *resolver != "" {
		res = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, *resolver)
		}}
	}
	failed := 0
	for _, k := range keys {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := dkim.Check(cctx, res.LookupTXT, k)
		cancel()
		name := dkim.RecordName(k.Domain, k.Selector)
		if err != nil {
			fmt.Fprintf(stdout, "FAIL  %s: %v\n", name, err)
			failed++
			continue
		}
		state := "active"
		if !k.Active {
			state = "inactive"
		}
		fmt.Fprintf(stdout, "ok    %s matches %s (%s, %s)\n", name, k.File, k.Algorithm(), state)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d DKIM keys failed the check", failed, len(keys))
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
