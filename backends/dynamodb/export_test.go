package dynamodb

import (
	"context"
	"net/http"
	"time"
)

// Transport is the transport the store's requests go through, for a test
// that counts them to wrap.
func Transport() http.RoundTripper { return httpClient().GetTransport() }

// SweepSpooling gives up, as Restore does at now, on the bytes that have
// waited for their row too long.
func (s *Store) SweepSpooling(ctx context.Context, now time.Time) error {
	return s.sweepSpooling(ctx, now)
}

// StageReceipt writes the chunks of a receipt too large for a transaction,
// with their pending item, as SaveReceipt does first, and stops there: as
// a relay that dies before the transaction that records it.
func (s *Store) StageReceipt(ctx context.Context, id, nonce string, raw []byte) error {
	r := receipt{nonce: nonce}
	_, _, err := s.stage(ctx, id, nonce, r.prefix(), raw, nil)
	return err
}
