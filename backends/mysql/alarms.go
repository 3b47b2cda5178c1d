package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/genropy/postino/backends"
)

// setAlarm sets or moves an alarm inside q.
func setAlarm(ctx context.Context, q querier, a backends.Alarm) error {
	_, err := q.ExecContext(ctx, `INSERT INTO email_alarms (kind, email_id, due_at) VALUES (?, ?, ?)
		ON DUPLICATE KEY UPDATE due_at = VALUES(due_at)`, a.Kind, a.MessageID, a.At.UTC())
	return err
}

func (s *Store) SetAlarm(ctx context.Context, a backends.Alarm) error {
	if err := a.Check(); err != nil {
		return err
	}
	err := setAlarm(ctx, s.db, a)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1452 { // the message is not there (foreign key)
		return fmt.Errorf("alarm %s of %s: %w", a.Kind, a.MessageID, backends.ErrNotFound)
	}
	return err
}

func (s *Store) ClearAlarm(ctx context.Context, kind, messageID string) error {
	_, err := s.db.ExecContext(ctx, "DELETE FROM email_alarms WHERE email_id = ? AND kind = ?", messageID, kind)
	return err
}

func (s *Store) DueAlarms(ctx context.Context, kind string, now time.Time, limit int) ([]backends.Alarm, error) {
	due := dueAlarmsStmt(kind, now, limit)
	rows, err := s.db.QueryContext(ctx, due.Query, due.Args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []backends.Alarm
	for rows.Next() {
		a := backends.Alarm{Kind: kind}
		var at sql.NullTime
		if err := rows.Scan(&a.MessageID, &at); err != nil {
			return nil, err
		}
		a.At = at.Time
		out = append(out, a)
	}
	return out, rows.Err()
}

// dueAlarmsStmt reads the alarms of kind due by now, in order
// (idx_alarm_due).
func dueAlarmsStmt(kind string, now time.Time, limit int) stmt {
	return stmt{Query: `SELECT email_id, due_at FROM email_alarms WHERE kind = ? AND due_at <= ?
		ORDER BY due_at, email_id LIMIT ?`, Args: []any{kind, clamp(now), limit}}
}
