package dynamodb

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

// Item layout, on the seed's single table (partition key Id, sort key
// Status):
//
//   - the _META item of a message: Attributes.Latest is its status, and the
//     rest of the message lives in Attributes too;
//   - one item per status reached, sort key the status name; a status
//     reached again gets "#n" for its n-th time (READY, READY#2, …), so
//     that retries keep every step, and the first stays as the seed has it;
//   - EVENT#000001 … for its events;
//   - _BATCH items (Id "_BATCH#code") for suspended batches, in QueueIndex
//     under BATCHES;
//   - _ALARM#kind for each alarm of the message, in QueueIndex under
//     ALARM:kind by the time it rings (its _META item keeps which alarms
//     it has, since a PartiQL UPDATE cannot create an item);
//   - _SPOOL#<nonce>#0001 … for its bytes and _RECEIPT#<nonce>#0001 … for
//     its receipts, when the store keeps them (bodies.go, receipts.go).
//
// The seed's StatusIndex is made only for tools that know the seed (see
// seedIndex); the relay reads five indexes of its own: QueueIndex (Queue,
// QueueKey) orders each status for claims, leases and retention; DueIndex
// (Queue, DueKey) orders the statuses claims take from by due time, so
// that a claim reads only messages due (see claimable);
// MetaIndex (MetaShard, Id) lists the _META items; MessageIdIndex finds
// messages by Message-ID; BatchIndex (BatchKey) finds the messages of a
// batch, the undelivered ones apart (batchParts).
//
// No index key is shared by every message: a message's Queue is its status
// and its shard ("READY#3"), its MetaShard "_META#3", its shard fixed by its
// id (shardOf); readers query the shards at once and merge them in key
// order. Events (EVENT:pending#3) and alarms (ALARM:kind#3) go in their
// message's shard too. The READY message of a suspended batch is held: its Queue is
// "HELD:READY#3", out of the claims' way, until the batch is activated.
//
// Counts come from counter items (counts.go), moved in the transaction of
// every change of status.
const (
	metaStatus  = "_META"
	eventPrefix = "EVENT#"
	eventQueue  = "EVENT:"
	heldQueue   = "HELD:"
	keyLayout   = "20060102T150405.000000000" // fixed width: sorts as time
	timeLayout  = time.RFC3339Nano
)

func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

// itemKey is the key of the item of partition id and sort key sk.
func itemKey(id, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"Id": str(id), "Status": str(sk)}
}

// deleteOf is the batch write that deletes the item id, sk.
func deleteOf(id, sk string) types.WriteRequest {
	return types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: itemKey(id, sk)}}
}
func num(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}
func tm(t time.Time) types.AttributeValue { return str(formatTime(t)) }

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeLayout)
}

func keyTime(t time.Time) string { return t.UTC().Format(keyLayout) }

func getS(m map[string]types.AttributeValue, k string) string {
	if v, ok := m[k].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func getN(m map[string]types.AttributeValue, k string) int64 {
	if v, ok := m[k].(*types.AttributeValueMemberN); ok {
		i, _ := strconv.ParseInt(v.Value, 10, 64)
		return i
	}
	return 0
}

func getM(m map[string]types.AttributeValue, k string) map[string]types.AttributeValue {
	if v, ok := m[k].(*types.AttributeValueMemberM); ok {
		return v.Value
	}
	return nil
}

func getTime(m map[string]types.AttributeValue, k string) time.Time {
	t, _ := time.Parse(timeLayout, getS(m, k))
	return t
}

// ttlOf reads a TTL at the root, or in Attributes for legacy items; nil when
// neither has one.
func ttlOf(item map[string]types.AttributeValue) *int64 {
	for _, m := range []map[string]types.AttributeValue{item, getM(item, "Attributes")} {
		if _, ok := m["TTL"].(*types.AttributeValueMemberN); ok {
			v := getN(m, "TTL")
			return &v
		}
	}
	return nil
}

// meta is a message as its _META item holds it, with the bookkeeping the
// store needs.
type meta struct {
	msg      backends.Message
	held     bool               // READY waits for its batch's activation
	seq      int64              // revision: one more with each write
	hasSeq   bool               // false for a legacy item
	eventSeq int64              // events recorded so far
	reached  map[string]int64   // times each status was reached
	alarms   map[string]string  // the message's alarms: kind -> QueueKey of its item
	receipts map[string]receipt // the receipts kept with it, by name
	ttl      *int64
}

func metaFromItem(item map[string]types.AttributeValue) (*meta, error) {
	a := getM(item, "Attributes")
	m := &meta{reached: map[string]int64{}, alarms: map[string]string{}, ttl: ttlOf(item)}
	msg := &m.msg
	msg.ID = getS(item, "Id")
	msg.Status = backends.Status(getS(a, "Latest"))
	msg.Reason = getS(a, "Reason")
	msg.Version = 0
	msg.EmlPath = getS(a, "EmlFilePath")
	if msg.EmlPath == "" {
		msg.EmlPath = getS(item, "EmlFilePath") // legacy items kept it at the root
	}
	msg.PayloadPath = getS(a, "PayloadFilePath")
	if msg.PayloadPath == "" {
		msg.PayloadPath = getS(item, "PayloadFilePath")
	}
	msg.UpdatedAt = getTime(a, "UpdatedAt")
	msg.CreatedAt = getTime(a, "CreatedAt")
	if msg.CreatedAt.IsZero() {
		msg.CreatedAt = msg.UpdatedAt
	}
	msg.MessageID = getS(a, "MessageId")
	msg.Priority = backends.PriorityNormal
	if _, ok := a["Priority"]; ok {
		msg.Priority = int(getN(a, "Priority"))
	}
	msg.Batch = getS(a, "Batch")
	msg.DueAt = getTime(a, "DueAt")
	msg.Attempts = int(getN(a, "Attempts"))
	msg.LeaseUntil = getTime(a, "LeaseUntil")
	msg.Route = getS(a, "Route")
	msg.TTL = m.ttl
	if env := getS(a, "Envelope"); env != "" {
		if err := json.Unmarshal([]byte(env), &msg.Envelope); err != nil {
			return nil, fmt.Errorf("message %s: stored envelope is unreadable: %w", msg.ID, err)
		}
	}
	if res := getS(a, "Results"); res != "" {
		if err := json.Unmarshal([]byte(res), &msg.Results); err != nil {
			return nil, fmt.Errorf("message %s: stored results are unreadable: %w", msg.ID, err)
		}
	}
	if v, ok := a["Held"].(*types.AttributeValueMemberBOOL); ok {
		m.held = v.Value
	}
	_, m.hasSeq = a["Seq"]
	m.seq = getN(a, "Seq")
	m.eventSeq = getN(a, "EventSeq")
	for k, v := range getM(a, "Alarms") {
		if sv, ok := v.(*types.AttributeValueMemberS); ok {
			m.alarms[k] = sv.Value
		}
	}
	m.receipts = receiptsOf(getM(a, "Receipts"))
	for k, v := range getM(a, "Reached") {
		if nv, ok := v.(*types.AttributeValueMemberN); ok {
			m.reached[k], _ = strconv.ParseInt(nv.Value, 10, 64)
		}
	}
	return m, nil
}

// attributes is the Attributes map of a _META item.
func (m *meta) attributes() map[string]types.AttributeValue {
	msg := &m.msg
	env, _ := json.Marshal(msg.Envelope)
	a := map[string]types.AttributeValue{
		"Latest":    str(string(msg.Status)),
		"UpdatedAt": tm(msg.UpdatedAt),
		"CreatedAt": tm(msg.CreatedAt),
		"Priority":  num(int64(msg.Priority)),
		"DueAt":     tm(msg.DueAt),
		"Attempts":  num(int64(msg.Attempts)),
		"Envelope":  str(string(env)),
		"Seq":       num(m.seq),
		"EventSeq":  num(m.eventSeq),
	}
	opt := map[string]string{"Reason": msg.Reason, "EmlFilePath": msg.EmlPath, "PayloadFilePath": msg.PayloadPath,
		"MessageId": msg.MessageID, "Batch": msg.Batch, "Route": msg.Route, "LeaseUntil": formatTime(msg.LeaseUntil)}
	for k, v := range opt {
		if v != "" {
			a[k] = str(v)
		}
	}
	if msg.Results != nil {
		b, _ := json.Marshal(msg.Results)
		a["Results"] = str(string(b))
	}
	if m.held {
		a["Held"] = &types.AttributeValueMemberBOOL{Value: true}
	}
	reached := map[string]types.AttributeValue{}
	for k, v := range m.reached {
		reached[k] = num(v)
	}
	a["Reached"] = &types.AttributeValueMemberM{Value: reached}
	if len(m.alarms) > 0 {
		alarms := map[string]types.AttributeValue{}
		for k, v := range m.alarms {
			alarms[k] = str(v)
		}
		a["Alarms"] = &types.AttributeValueMemberM{Value: alarms}
	}
	if len(m.receipts) > 0 {
		a["Receipts"] = receiptsAttribute(m.receipts)
	}
	return a
}

// queueKey orders the messages of one status in QueueIndex. The statuses
// claims take from (ACCEPTED, READY) go by priority, queue time
// (backends.Message.QueueTime), age and id; a working status goes by its
// lease, which restore walks; the others by their queue time, which
// retention walks.
func queueKey(msg *backends.Message) string {
	switch msg.Status {
	case backends.StatusAccepted, backends.StatusReady:
		return fmt.Sprintf("%d#%s#%s#%s", msg.Priority, keyTime(msg.QueueTime()), keyTime(msg.CreatedAt), msg.ID)
	}
	if msg.Status.Working() {
		return keyTime(msg.LeaseUntil) + "#" + msg.ID
	}
	return keyTime(msg.QueueTime()) + "#" + msg.ID
}

// dueKey orders the messages of a status claims take from in DueIndex: by
// the time they are due. What comes after needs no order of its own: a
// claim sorts what it read by QueueKey, or reads the shard again in that
// order when it has more due than it takes.
func dueKey(msg *backends.Message) string {
	return keyTime(msg.QueueTime()) + "#" + msg.ID
}

// shards is how many ways every index key shared by all messages is split.
// It is part of the layout: changing it needs create-table to move the
// items (see initLayout).
const shards = 8

// shardOf is the shard of a message, fixed by its id.
func shardOf(id string) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % shards)
}

func sharded(key string, shard int) string { return key + "#" + strconv.Itoa(shard) }

// queueOf is the QueueIndex partition of a message.
func queueOf(m *meta) string {
	q := string(m.msg.Status)
	if m.held && m.msg.Status == backends.StatusReady {
		q = heldQueue + q
	}
	return sharded(q, shardOf(m.msg.ID))
}

// statusSortKey is the sort key of the item of a status reached for the
// count-th time.
func statusSortKey(st backends.Status, count int64) string {
	if count <= 1 {
		return string(st)
	}
	return fmt.Sprintf("%s#%d", st, count)
}

// historyFromItem reads a status item; ok is false for other items.
func historyFromItem(item map[string]types.AttributeValue) (backends.HistoryEntry, int64, bool) {
	sk := getS(item, "Status")
	if sk == metaStatus || strings.HasPrefix(sk, eventPrefix) || strings.HasPrefix(sk, "_") {
		return backends.HistoryEntry{}, 0, false
	}
	st, _, _ := strings.Cut(sk, "#")
	a := getM(item, "Attributes")
	e := backends.HistoryEntry{Status: backends.Status(st), Reason: getS(a, "Reason"), At: getTime(a, "UpdatedAt")}
	if d := getS(a, "Details"); d != "" {
		e.Details = json.RawMessage(d)
	}
	return e, getN(a, "Seq"), true
}

func eventKey(seq int64) string { return fmt.Sprintf("%s%06d", eventPrefix, seq) }

// eventQueueOf is the QueueIndex partition of an event: its state and its
// message's shard.
func eventQueueOf(e *backends.Event) string {
	return sharded(eventQueue+string(e.State), shardOf(e.MessageID))
}

// eventQueueKey orders events of one state: due time for pending, lease for
// calling, last change otherwise.
func eventQueueKey(e *backends.Event) string {
	t := e.UpdatedAt
	switch e.State {
	case backends.EventPending:
		t = e.DueAt
	case backends.EventCalling:
		t = e.LeaseUntil
	}
	return fmt.Sprintf("%s#%s#%06d", keyTime(t), e.MessageID, e.Seq)
}

func eventAttributes(e *backends.Event) map[string]types.AttributeValue {
	a := map[string]types.AttributeValue{
		"EventId":   str(e.ID),
		"Outcome":   str(e.Outcome),
		"At":        tm(e.At),
		"State":     str(string(e.State)),
		"Attempts":  num(int64(e.Attempts)),
		"DueAt":     tm(e.DueAt),
		"UpdatedAt": tm(e.UpdatedAt),
		"Seq":       num(e.Seq),
	}
	opt := map[string]string{"Reason": e.Reason, "Details": string(e.Details), "LeaseUntil": formatTime(e.LeaseUntil), "LastError": e.LastError}
	for k, v := range opt {
		if v != "" {
			a[k] = str(v)
		}
	}
	if e.Acked != nil {
		b, _ := json.Marshal(e.Acked)
		a["Acked"] = str(string(b))
	}
	return a
}

func eventFromItem(item map[string]types.AttributeValue) *backends.Event {
	a := getM(item, "Attributes")
	e := &backends.Event{
		ID: getS(a, "EventId"), MessageID: getS(item, "Id"), Seq: getN(a, "Seq"), Outcome: getS(a, "Outcome"),
		Reason: getS(a, "Reason"), At: getTime(a, "At"), State: backends.EventState(getS(a, "State")),
		Attempts: int(getN(a, "Attempts")), DueAt: getTime(a, "DueAt"), LeaseUntil: getTime(a, "LeaseUntil"),
		LastError: getS(a, "LastError"), UpdatedAt: getTime(a, "UpdatedAt"),
	}
	if d := getS(a, "Details"); d != "" {
		e.Details = json.RawMessage(d)
	}
	if acks := getS(a, "Acked"); acks != "" {
		json.Unmarshal([]byte(acks), &e.Acked)
	}
	return e
}
