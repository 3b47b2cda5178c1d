package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/genropy/postino/backends"
)

// Link is Links.Link: link records key for message id, or finds the
// message missing.
func (s Store) Link(key, id string, link func() (missing bool, err error)) error {
	if err := backends.CheckLinkKey(key); err != nil {
		return err
	}
	missing, err := link()
	if missing {
		return fmt.Errorf("link %s to %s: %w", key, id, backends.ErrNotFound)
	}
	return err
}

// Linked is Links.Linked: the message st selects, by a link's key.
func (s Store) Linked(ctx context.Context, key string, st Stmt) (string, error) {
	var id string
	err := queryRow(ctx, s.DB, st, &id)
	if errors.Is(err, errNoRow) {
		return "", fmt.Errorf("link %s: %w", key, backends.ErrNotFound)
	}
	return id, err
}
