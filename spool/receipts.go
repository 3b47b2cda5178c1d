package spool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/genropy/postino/backends"
)

// Receipts are kept beside their message, in <message file without
// .eml>.receipts/, as long as the message is: they are evidence (a PEC
// receipt has legal value).
const receiptsSuffix = ".receipts"

func receiptsDir(path string) string {
	return strings.TrimSuffix(path, suffix) + receiptsSuffix
}

// SaveReceipt keeps raw as receipt name of the message at path, durably;
// saving the same name again replaces it with the same bytes.
func (s *Spool) SaveReceipt(path, name string, raw []byte) error {
	if err := backends.CheckReceiptName(name); err != nil {
		return err
	}
	dir, err := s.resolve(receiptsDir(path))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("spool: receipts of %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("spool: receipt %s: %w", name, err)
	}
	_, err = tmp.Write(raw)
	if err == nil {
		err = syncData(tmp)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, name))
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("spool: receipt %s of %s: %w", name, path, err)
	}
	return nil
}

// Receipts lists the receipts kept with the message at path, by name.
func (s *Spool) Receipts(path string) ([]backends.Receipt, error) {
	dir, err := s.resolve(receiptsDir(path))
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []backends.Receipt
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, backends.Receipt{Name: e.Name(), Size: info.Size(), SavedAt: info.ModTime()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// OpenReceipt opens one receipt of the message at path.
func (s *Spool) OpenReceipt(path, name string) (*os.File, error) {
	if err := backends.CheckReceiptName(name); err != nil {
		return nil, err
	}
	dir, err := s.resolve(receiptsDir(path))
	if err != nil {
		return nil, err
	}
	return os.Open(filepath.Join(dir, name))
}

// ReceiptStore is an outbox that keeps the receipts of the messages whose
// bytes it keeps (spool.store outbox).
type ReceiptStore interface {
	// SaveReceipt keeps raw as receipt name of message id; the first copy
	// of a name stays. ErrNotFound when the message is not there.
	SaveReceipt(ctx context.Context, id, name string, raw []byte) error
	// Receipts lists the receipts of message id by name; ErrNotFound when
	// the message is not there.
	Receipts(ctx context.Context, id string) ([]backends.Receipt, error)
	OpenReceipt(ctx context.Context, id, name string) (io.ReadCloser, error)
}

// Evidence keeps the receipts of each message where its path says its
// bytes are, as Bodies reads them: in the outbox store for a
// backends.BodyRef, so that any relay of the fleet serves them and none
// needs a disk that outlives it, beside the message file otherwise.
type Evidence struct {
	files *Spool
	store ReceiptStore // nil when the outbox keeps no bytes
}

// NewEvidence keeps receipts in the spool and, for BodyRefs, in store,
// which may be nil when the outbox keeps no bytes.
func NewEvidence(files *Spool, store ReceiptStore) *Evidence {
	return &Evidence{files: files, store: store}
}

// inStore returns the id of a message whose receipts the store keeps; ok
// is false for a spool file's.
func (e *Evidence) inStore(path string) (id string, ok bool, err error) {
	id, ok = backends.BodyID(path)
	if ok && e.store == nil {
		return "", true, fmt.Errorf("spool: the receipts of %s are in the outbox: %w", id, errNoStore)
	}
	return id, ok, nil
}

// SaveReceipt keeps raw as receipt name of the message at path; saving a
// name again keeps one copy.
func (e *Evidence) SaveReceipt(ctx context.Context, path, name string, raw []byte) error {
	id, ok, err := e.inStore(path)
	switch {
	case err != nil:
		return err
	case ok:
		return e.store.SaveReceipt(ctx, id, name, raw)
	}
	return e.files.SaveReceipt(path, name, raw)
}

// Receipts lists the receipts kept with the message at path, by name.
func (e *Evidence) Receipts(ctx context.Context, path string) ([]backends.Receipt, error) {
	id, ok, err := e.inStore(path)
	switch {
	case err != nil:
		return nil, err
	case ok:
		return e.store.Receipts(ctx, id)
	}
	return e.files.Receipts(path)
}

// OpenReceipt opens one receipt of the message at path; one it does not
// have is backends.ErrNotFound, wherever it is kept.
func (e *Evidence) OpenReceipt(ctx context.Context, path, name string) (io.ReadCloser, error) {
	id, ok, err := e.inStore(path)
	switch {
	case err != nil:
		return nil, err
	case ok:
		return e.store.OpenReceipt(ctx, id, name)
	}
	f, err := e.files.OpenReceipt(path, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("spool: receipt %s of %s: %w", name, path, backends.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}
