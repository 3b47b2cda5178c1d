package dynamodb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

// A message's bytes (spool.store outbox) are items of its own partition,
// sort key _SPOOL#<nonce>#0001, _SPOOL#<nonce>#0002 …, each holding up to
// bodyChunk bytes in Data. The nonce is the one of the message's BodyRef:
// a second submission of an id writes its own keys, and cannot overwrite
// the bytes of the row that was made first. The prefix sorts after _META,
// so that History and Purge read the message's other items with
// "Status" <= '_META' and never pay for its bytes. Like every item with an
// Id and a Status they have an entry in the seed's StatusIndex, under
// their own Status, with only the keys and TTL projected: a few bytes
// each, and out of the way of its Status = '_META' query.
//
// Bytes that fit in the create's transaction are written by it. Larger
// ones are written first, 25 to a request, with a pending item
// (_SPOOLING#<nonce>, in QueueIndex under SPOOLING by the time it was
// written) that the create's transaction deletes on condition that it is
// still there and not given up. Bytes whose row never came keep their
// pending item: Restore, which the relays' housekeeping runs, gives up on
// those older than spoolGrace and deletes them. A message's receipts are
// kept in chunks the same way (receipts.go).
const (
	spoolPrefix    = "_SPOOL#"
	spoolingPrefix = "_SPOOLING#"
	spoolingQueue  = "SPOOLING"
	// bodyChunk keeps a chunk's item under DynamoDB's 400 KB.
	bodyChunk = 350_000
	// txBodyBytes is how many bytes a create's transaction carries with
	// the row's own items, under its 4 MB and 100 statements.
	txBodyBytes = 3 << 20
	// spoolGrace is how long bytes may wait for their row: far beyond a
	// create's commit timeout.
	spoolGrace = time.Hour
	// sweepLimit bounds the pending items one Restore gives up on.
	sweepLimit = 100
)

// chunkKey is the sort key of the seq-th chunk (from 1) of bytes kept
// under prefix: spoolPrefix or receiptPrefix, a nonce and '#'.
func chunkKey(prefix string, seq int) string { return fmt.Sprintf("%s%04d", prefix, seq) }

// bodyNonce is the nonce of the BodyRef msg.EmlPath.
func bodyNonce(msg *backends.Message) (string, error) {
	ref, ok := strings.CutPrefix(msg.EmlPath, backends.BodyRef(msg.ID, ""))
	if !ok || ref == "" || strings.Contains(ref, "#") {
		return "", fmt.Errorf("create message %s: its bytes need a path made by backends.BodyRef, not %q", msg.ID, msg.EmlPath)
	}
	return ref, nil
}

// chunkItems cuts data into the items of its chunks in partition id, under
// prefix; empty data has one. Each says how many there are (Of), so that a
// reader missing one (expired by its TTL) knows.
func chunkItems(id, prefix string, data []byte, ttl *int64) []map[string]types.AttributeValue {
	var out []map[string]types.AttributeValue
	of := num(int64(max(1, (len(data)+bodyChunk-1)/bodyChunk)))
	for seq, off := 1, 0; off < len(data) || seq == 1; seq++ {
		end := min(off+bodyChunk, len(data))
		it := map[string]types.AttributeValue{"Id": str(id), "Status": str(chunkKey(prefix, seq)),
			"Data": &types.AttributeValueMemberB{Value: data[off:end]}, "Of": of}
		if ttl != nil {
			it["TTL"] = num(*ttl)
		}
		out = append(out, it)
		off = end
	}
	return out
}

// stage prepares bytes of partition id, kept under prefix, for a
// transaction to commit: the statements it carries for them, after it
// has written those too large to go with it, with a pending item under
// nonce (naming the chunks' prefix) that the statements delete on
// condition that it is still there and not given up. It returns how many
// chunks there are.
func (s *Store) stage(ctx context.Context, id, nonce, prefix string, data []byte, ttl *int64) ([]types.ParameterizedStatement, int, error) {
	items := chunkItems(id, prefix, data, ttl)
	if len(data) <= txBodyBytes {
		stmts := make([]types.ParameterizedStatement, len(items))
		for i, it := range items {
			stmts[i] = s.insert(it)
		}
		return stmts, len(items), nil
	}
	pending := map[string]types.AttributeValue{"Id": str(id), "Status": str(spoolingPrefix + nonce), "Chunks": str(prefix),
		"Count": num(int64(len(items))), "Queue": str(sharded(spoolingQueue, shardOf(id))), "QueueKey": str(keyTime(time.Now()))}
	if err := s.putItems(ctx, append([]map[string]types.AttributeValue{pending}, items...)); err != nil {
		return nil, 0, fmt.Errorf("write its bytes: %w", err)
	}
	// On a missing item only the Queue's comparison fails the condition.
	claim := stmt("DELETE FROM "+s.from("")+` WHERE "Id" = ? AND "Status" = ? AND "Queue" = ? AND "GivenUp" IS MISSING`,
		str(id), str(spoolingPrefix+nonce), pending["Queue"])
	return []types.ParameterizedStatement{claim}, len(items), nil
}

// spoolBody prepares the bytes of a create (stage). It returns how many
// chunks there are, kept on the _META item for Purge.
func (s *Store) spoolBody(ctx context.Context, msg *backends.Message, ttl *int64) ([]types.ParameterizedStatement, int, error) {
	nonce, err := bodyNonce(msg)
	if err != nil {
		return nil, 0, err
	}
	stmts, n, err := s.stage(ctx, msg.ID, nonce, spoolPrefix+nonce+"#", msg.Body, ttl)
	if err != nil {
		return nil, 0, fmt.Errorf("create message %s: %w", msg.ID, err)
	}
	return stmts, n, nil
}

// readChunks reads, in order, the chunks of partition id whose keys begin
// with prefix, and gives fn each one's key, bytes and how many chunks its
// bytes were cut in.
func (s *Store) readChunks(ctx context.Context, id, prefix string, fn func(key string, data []byte, of int64)) error {
	in := &dynamodb.QueryInput{TableName: aws.String(s.table), ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("Id = :id AND begins_with(#s, :p)"),
		ExpressionAttributeNames:  map[string]string{"#s": "Status"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":id": str(id), ":p": str(prefix)}}
	for {
		resp, err := s.db.Query(ctx, in)
		if err != nil {
			return err
		}
		for _, it := range resp.Items {
			data, _ := it["Data"].(*types.AttributeValueMemberB)
			if data == nil {
				return fmt.Errorf("chunk %s without Data", getS(it, "Status"))
			}
			fn(getS(it, "Status"), data.Value, getN(it, "Of"))
		}
		if resp.LastEvaluatedKey == nil {
			return nil
		}
		in.ExclusiveStartKey = resp.LastEvaluatedKey
	}
}

// OpenBody reads the bytes the store keeps for message id, chunk by chunk
// in order. Bytes of another submission of the id that never made the row
// may lie beside them until swept: then the row's path says which are its.
func (s *Store) OpenBody(ctx context.Context, id string) (io.ReadCloser, error) {
	chunks := map[string][][]byte{}
	of := map[string]int64{}
	var nonces []string
	err := s.readChunks(ctx, id, spoolPrefix, func(key string, data []byte, n int64) {
		nonce, _, _ := strings.Cut(strings.TrimPrefix(key, spoolPrefix), "#")
		if _, ok := chunks[nonce]; !ok {
			nonces = append(nonces, nonce)
		}
		chunks[nonce] = append(chunks[nonce], data)
		of[nonce] = n
	})
	if err != nil {
		return nil, fmt.Errorf("read the body of %s: %w", id, err)
	}
	nonce, err := s.rowNonce(ctx, id, nonces)
	if err != nil {
		return nil, err
	}
	if got := int64(len(chunks[nonce])); got != of[nonce] {
		// Sent short, the message would be cut; unread, it waits.
		return nil, fmt.Errorf("the body of %s: %d of its %d chunks are there (expired by their TTL?)", id, got, of[nonce])
	}
	return io.NopCloser(bytes.NewReader(bytes.Join(chunks[nonce], nil))), nil
}

// rowNonce picks, among the nonces of the bytes found for id, the one of
// the row's path; the only one found needs no read.
func (s *Store) rowNonce(ctx context.Context, id string, nonces []string) (string, error) {
	switch len(nonces) {
	case 0:
		return "", fmt.Errorf("the body of %s: %w", id, backends.ErrNotFound)
	case 1:
		return nonces[0], nil
	}
	m, err := s.getMeta(ctx, id)
	if err != nil {
		return "", fmt.Errorf("the body of %s: %w", id, err)
	}
	nonce, err := bodyNonce(&m.msg)
	if err != nil {
		return "", fmt.Errorf("the body of %s: %w", id, err)
	}
	return nonce, nil
}

// chunkDeletes are the deletes of the n chunks of partition id under
// prefix.
func chunkDeletes(id, prefix string, n int64) []types.WriteRequest {
	out := make([]types.WriteRequest, max(n, 0))
	for i := range out {
		out[i] = deleteOf(id, chunkKey(prefix, i+1))
	}
	return out
}

// bodyDeletes are the deletes of the bytes a message's row kept: its own
// (chunks of them) and its receipts', which its _META item lists.
func bodyDeletes(m *meta, chunks int64) []types.WriteRequest {
	var out []types.WriteRequest
	if nonce, err := bodyNonce(&m.msg); err == nil {
		out = chunkDeletes(m.msg.ID, spoolPrefix+nonce+"#", chunks)
	}
	for _, r := range m.receipts {
		out = append(out, chunkDeletes(m.msg.ID, r.prefix(), r.chunks)...)
	}
	return out
}

// sweepSpooling gives up on the bytes that have waited for their row for
// longer than spoolGrace, up to sweepLimit of them: it marks the pending
// item given up, so that a create that comes after all fails instead of
// making a row without bytes, then deletes the bytes and the pending item.
// Interrupted, it starts over from the pending item next time.
func (s *Store) sweepSpooling(ctx context.Context, now time.Time) error {
	items, err := s.queuedShards(ctx, spoolingQueue, lowKey, keyTime(now.Add(-spoolGrace)), sweepLimit)
	if err != nil {
		return fmt.Errorf("read bytes without their row: %w", err)
	}
	for _, it := range items {
		id, sk := getS(it, "Id"), getS(it, "Status")
		_, err := s.txn(ctx, []types.ParameterizedStatement{stmt("UPDATE "+s.from("")+` SET "GivenUp" = ? WHERE "Id" = ? AND "Status" = ?`,
			tm(now), str(id), str(sk))})
		if errors.Is(err, errCondition) {
			continue // its create made the row after all
		}
		if err != nil {
			return fmt.Errorf("give up the bytes of %s: %w", id, err)
		}
		dels := append(chunkDeletes(id, getS(it, "Chunks"), getN(it, "Count")), deleteOf(id, sk))
		if err := s.writeItems(ctx, dels); err != nil {
			return fmt.Errorf("delete the bytes of %s given up: %w", id, err)
		}
	}
	return nil
}
