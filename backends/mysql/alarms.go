package mysql

import (
	"context"
	"time"

	"github.com/genropy/postino/backends"
)

func (s *Store) SetAlarm(ctx context.Context, a backends.Alarm) error {
	return s.sql.SetAlarm(ctx, a, stmt{Query: `INSERT INTO email_alarms (kind, email_id, due_at) VALUES (?, ?, ?)
		ON DUPLICATE KEY UPDATE due_at = VALUES(due_at)`, Args: []any{a.Kind, a.MessageID, a.At.UTC()}})
}

func (s *Store) ClearAlarm(ctx context.Context, kind, messageID string) error {
	_, err := s.db.ExecContext(ctx, "DELETE FROM email_alarms WHERE email_id = ? AND kind = ?", messageID, kind)
	return err
}

func (s *Store) DueAlarms(ctx context.Context, kind string, now time.Time, limit int) ([]backends.Alarm, error) {
	return s.sql.DueAlarms(ctx, kind, dueAlarmsStmt(kind, now, limit))
}

// dueAlarmsStmt reads the alarms of kind due by now, in order
// (idx_alarm_due).
func dueAlarmsStmt(kind string, now time.Time, limit int) stmt {
	return stmt{Query: `SELECT email_id, due_at FROM email_alarms WHERE kind = ? AND due_at <= ?
		ORDER BY due_at, email_id LIMIT ?`, Args: []any{kind, clamp(now), limit}}
}
