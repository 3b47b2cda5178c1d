package postgres

import (
	"context"
	"time"

	"github.com/genropy/postino/backends"
)

func (s *Store) SetAlarm(ctx context.Context, a backends.Alarm) error {
	return s.sql.SetAlarm(ctx, a, stmt{Query: `INSERT INTO email_alarms (kind, email_id, due_at) VALUES ($1, $2, $3)
		ON CONFLICT (email_id, kind) DO UPDATE SET due_at = EXCLUDED.due_at`, Args: []any{a.Kind, a.MessageID, ts(a.At)}})
}

func (s *Store) ClearAlarm(ctx context.Context, kind, messageID string) error {
	_, err := s.pool.Exec(ctx, "DELETE FROM email_alarms WHERE email_id = $1 AND kind = $2", messageID, kind)
	return err
}

func (s *Store) DueAlarms(ctx context.Context, kind string, now time.Time, limit int) ([]backends.Alarm, error) {
	return s.sql.DueAlarms(ctx, kind, dueAlarmsStmt(kind, now, limit))
}

// dueAlarmsStmt reads the alarms of kind due by now, in order
// (idx_alarm_due).
func dueAlarmsStmt(kind string, now time.Time, limit int) stmt {
	return stmt{Query: `SELECT email_id, due_at FROM email_alarms WHERE kind = $1 AND due_at <= $2
		ORDER BY due_at, email_id LIMIT $3`, Args: []any{kind, ts(now), limit}}
}
