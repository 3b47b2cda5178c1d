package dkim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	msgdkim "github.com/emersion/go-msgauth/dkim"
)

// LookupTXT answers TXT questions; *net.Resolver does.
type LookupTXT func(ctx context.Context, name string) ([]string, error)

// ErrRecordMismatch: the published record does not verify the key's
// signatures.
var ErrRecordMismatch = errors.New("the DNS record does not match the key")

// Check looks up the record of key's selector and tells whether receivers
// will verify key's signatures with it: it signs a probe message and lets
// go-msgauth's verifier judge it against the published record, exactly as a
// receiver would. The error says what is wrong and what to publish.
func Check(ctx context.Context, lookup LookupTXT, key *Key) error {
	want, err := Record(key.Signer)
	if err != nil {
		return err
	}
	name := RecordName(key.Domain, key.Selector)
	publish := fmt.Sprintf("publish: %s", ZoneLine(key.Domain, key.Selector, want))
	txts, err := lookup(ctx, name)
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return fmt.Errorf("no TXT record at %s (%s); %s", name, dnsErr.Err, publish)
	case err != nil:
		return fmt.Errorf("cannot look up %s: %w", name, err)
	}
	// The probe is signed by this key alone, active or not.
	ring, err := newKeyring(DefaultPolicy())
	if err != nil {
		return err
	}
	if err := ring.add(&Key{Domain: key.Domain, Selector: key.Selector, File: key.File, Active: true, Signer: key.Signer}); err != nil {
		return err
	}
	probe := fmt.Sprintf("From: <postmaster@%s>\r\nTo: <postmaster@%s>\r\nSubject: postino dkim check\r\nDate: %s\r\nMessage-ID: <check@%s>\r\n\r\nprobe\r\n",
		key.Domain, key.Domain, time.Now().Format(time.RFC1123Z), key.Domain)
	res, err := NewSigner(ring, nil).Sign(strings.NewReader(probe), "")
	if err != nil {
		return err
	}
	verifs, err := msgdkim.VerifyWithOptions(strings.NewReader(res.Fields+probe), &msgdkim.VerifyOptions{
		LookupTXT: func(string) ([]string, error) { return txts, nil },
	})
	if err != nil {
		return fmt.Errorf("verify the probe: %w", err)
	}
	if len(verifs) != 1 {
		return fmt.Errorf("verify the probe: %d verifications", len(verifs))
	}
	if err := verifs[0].Err; err != nil {
		return fmt.Errorf("%w: %s (%s) does not verify %s's signatures: %v; found %q; %s",
			ErrRecordMismatch, name, key.Algorithm(), key.File, err, strings.Join(txts, " | "), publish)
	}
	return nil
}
