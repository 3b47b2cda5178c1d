package dynamodb

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

// The receipts of a message whose bytes the store keeps (spool.store
// outbox) are items of its partition too, kept as its bytes are
// (bodies.go): chunks _RECEIPT#<nonce>#0001 … of up to bodyChunk bytes,
// written by the transaction that records the receipt when they fit in it,
// else before it with a pending item that Restore gives up on when that
// transaction never came. The nonce is drawn for each receipt saved, so
// that two relays saving one receipt at once never write the same keys.
// They sort after _META, out of the way of History's and Purge's reads.
//
// The _META item lists the receipts (Attributes.Receipts: name -> Nonce,
// Chunks, Size, SavedAt), recorded by a change of the message like an
// alarm's: listing them reads that item only, the first copy of a name
// recorded is the one kept, and Purge deletes their chunks by their keys,
// unread, with the message's bytes (bodyDeletes). A receipt recorded
// after Purge read the message changes its revision, and Purge's delete,
// held to the revision it read, leaves the message to the next round.
const receiptPrefix = "_RECEIPT#"

// receipt is a receipt as the _META item lists it.
type receipt struct {
	nonce  string
	chunks int64
	size   int64
	saved  time.Time
}

func (r receipt) prefix() string { return receiptPrefix + r.nonce + "#" }

// receiptsOf reads the receipts a _META item lists.
func receiptsOf(attr map[string]types.AttributeValue) map[string]receipt {
	out := make(map[string]receipt, len(attr))
	for name, v := range attr {
		if r, ok := v.(*types.AttributeValueMemberM); ok {
			out[name] = receipt{nonce: getS(r.Value, "Nonce"), chunks: getN(r.Value, "Chunks"),
				size: getN(r.Value, "Size"), saved: getTime(r.Value, "SavedAt")}
		}
	}
	return out
}

// receiptsAttribute is the list of receipts of a _META item.
func receiptsAttribute(rs map[string]receipt) types.AttributeValue {
	out := make(map[string]types.AttributeValue, len(rs))
	for name, r := range rs {
		out[name] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"Nonce": str(r.nonce), "Chunks": num(r.chunks), "Size": num(r.size), "SavedAt": tm(r.saved)}}
	}
	return &types.AttributeValueMemberM{Value: out}
}

// SaveReceipt keeps raw as receipt name of message id; the first copy of
// a name recorded stays.
func (s *Store) SaveReceipt(ctx context.Context, id, name string, raw []byte) error {
	if err := backends.CheckReceiptName(name); err != nil {
		return err
	}
	now := time.Now().UTC()
	r := receipt{nonce: backends.Nonce(), size: int64(len(raw)), saved: now}
	var staged []types.ParameterizedStatement
	err := s.metaChange(ctx, id, func(m *meta) ([]types.ParameterizedStatement, error) {
		if _, ok := m.receipts[name]; ok {
			return nil, nil // saved before: by another relay, or read twice
		}
		if staged == nil {
			stmts, n, err := s.stage(ctx, id, r.nonce, r.prefix(), raw, s.ttlFor(now))
			if err != nil {
				return nil, err
			}
			staged, r.chunks = stmts, int64(n)
		}
		m.receipts[name] = r
		return staged, nil
	})
	if err != nil {
		return fmt.Errorf("receipt %s of %s: %w", name, id, err)
	}
	return nil
}

// Receipts lists the receipts of message id by name, as its _META item
// does.
func (s *Store) Receipts(ctx context.Context, id string) ([]backends.Receipt, error) {
	m, err := s.getMeta(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("the receipts of %s: %w", id, err)
	}
	var out []backends.Receipt
	for name, r := range m.receipts {
		out = append(out, backends.Receipt{Name: name, Size: r.size, SavedAt: r.saved})
	}
	slices.SortFunc(out, func(a, b backends.Receipt) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// OpenReceipt reads receipt name of message id, chunk by chunk in order.
func (s *Store) OpenReceipt(ctx context.Context, id, name string) (io.ReadCloser, error) {
	if err := backends.CheckReceiptName(name); err != nil {
		return nil, err
	}
	m, err := s.getMeta(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("receipt %s of %s: %w", name, id, err)
	}
	r, ok := m.receipts[name]
	if !ok {
		return nil, fmt.Errorf("receipt %s of %s: %w", name, id, backends.ErrNotFound)
	}
	var chunks [][]byte
	if err := s.readChunks(ctx, id, r.prefix(), func(_ string, data []byte, _ int64) { chunks = append(chunks, data) }); err != nil {
		return nil, fmt.Errorf("read receipt %s of %s: %w", name, id, err)
	}
	if int64(len(chunks)) != r.chunks {
		return nil, fmt.Errorf("receipt %s of %s: %d of its %d chunks are there (expired by their TTL?)", name, id, len(chunks), r.chunks)
	}
	return io.NopCloser(bytes.NewReader(bytes.Join(chunks, nil))), nil
}
