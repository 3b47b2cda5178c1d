package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

const (
	alarmPrefix = "_ALARM#"
	alarmQueue  = "ALARM:"
)

func alarmQueueKey(a backends.Alarm) string { return keyTime(a.At) + "#" + a.MessageID }

// alarmStmt sets or moves an alarm of message m: an insert when m has none
// of that kind, else an update, as m's _META item says (written by the
// same transaction).
func (s *Store) alarmStmt(m *meta, a backends.Alarm) types.ParameterizedStatement {
	key := alarmQueueKey(a)
	_, exists := m.alarms[a.Kind]
	m.alarms[a.Kind] = key
	if exists {
		return stmt("UPDATE "+s.from("")+` SET "QueueKey" = ? SET "At" = ? WHERE "Id" = ? AND "Status" = ?`,
			str(key), tm(a.At), str(a.MessageID), str(alarmPrefix+a.Kind))
	}
	item := map[string]types.AttributeValue{"Id": str(a.MessageID), "Status": str(alarmPrefix + a.Kind),
		"Queue": str(sharded(alarmQueue+a.Kind, shardOf(a.MessageID))), "QueueKey": str(key), "At": tm(a.At)}
	if m.ttl != nil {
		item["TTL"] = num(*m.ttl)
	}
	return s.insert(item)
}

func (s *Store) SetAlarm(ctx context.Context, a backends.Alarm) error {
	if err := a.Check(); err != nil {
		return err
	}
	err := s.metaChange(ctx, a.MessageID, func(m *meta) ([]types.ParameterizedStatement, error) {
		return []types.ParameterizedStatement{s.alarmStmt(m, a)}, nil
	})
	if err != nil {
		return fmt.Errorf("alarm %s of %s: %w", a.Kind, a.MessageID, err)
	}
	return nil
}

func (s *Store) ClearAlarm(ctx context.Context, kind, messageID string) error {
	err := s.metaChange(ctx, messageID, func(m *meta) ([]types.ParameterizedStatement, error) {
		if _, ok := m.alarms[kind]; !ok {
			return nil, nil
		}
		delete(m.alarms, kind)
		return []types.ParameterizedStatement{stmt("DELETE FROM "+s.from("")+` WHERE "Id" = ? AND "Status" = ?`,
			str(messageID), str(alarmPrefix+kind))}, nil
	})
	if errors.Is(err, backends.ErrNotFound) {
		return nil // gone with its message
	}
	return err
}

func (s *Store) DueAlarms(ctx context.Context, kind string, now time.Time, limit int) ([]backends.Alarm, error) {
	items, err := s.queuedShards(ctx, alarmQueue+kind, lowKey, keyTime(now)+"~", limit)
	if err != nil {
		return nil, err
	}
	var out []backends.Alarm
	for _, it := range items {
		if len(out) == limit {
			break
		}
		out = append(out, backends.Alarm{Kind: kind, MessageID: getS(it, "Id"), At: getTime(it, "At")})
	}
	return out, nil
}
