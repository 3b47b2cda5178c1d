package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/genropy/postino/backends"
)

// SetAlarm is Alarms.SetAlarm: st makes a's row, or moves it.
func (s Store) SetAlarm(ctx context.Context, a backends.Alarm, st Stmt) error {
	if err := a.Check(); err != nil {
		return err
	}
	_, err := s.DB.Exec(ctx, st.Query, st.Args...)
	if s.Fault(err) == NoParent {
		return fmt.Errorf("alarm %s of %s: %w", a.Kind, a.MessageID, backends.ErrNotFound)
	}
	return err
}

// DueAlarms reads the alarms of kind that st selects, rows of a message
// and a time.
func (s Store) DueAlarms(ctx context.Context, kind string, st Stmt) ([]backends.Alarm, error) {
	return QueryAll(ctx, s.DB, func(r Scanner) (backends.Alarm, error) {
		a := backends.Alarm{Kind: kind}
		var at *time.Time
		if err := r.Scan(&a.MessageID, &at); err != nil {
			return a, err
		}
		if at != nil {
			a.At = *at
		}
		return a, nil
	}, st)
}
