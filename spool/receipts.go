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

// OpenReceipt opens one receipt of the message at path; one it does not
// have is backends.ErrNotFound.
func (s *Spool) OpenReceipt(path, name string) (io.ReadCloser, error) {
	if err := backends.CheckReceiptName(name); err != nil {
		return nil, err
	}
	dir, err := s.resolve(receiptsDir(path))
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("spool: receipt %s of %s: %w", name, path, backends.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

// SaveReceipt keeps raw as receipt name of the message at path, where its
// bytes are (see Bodies); saving a name again keeps one copy.
func (b *Bodies) SaveReceipt(ctx context.Context, path, name string, raw []byte) error {
	id, inStore, err := b.where(path, "receipts")
	switch {
	case err != nil:
		return err
	case inStore:
		return b.store.SaveReceipt(ctx, id, name, raw)
	}
	return b.files.SaveReceipt(path, name, raw)
}

// Receipts lists the receipts kept with the message at path, by name.
func (b *Bodies) Receipts(ctx context.Context, path string) ([]backends.Receipt, error) {
	id, inStore, err := b.where(path, "receipts")
	switch {
	case err != nil:
		return nil, err
	case inStore:
		return b.store.Receipts(ctx, id)
	}
	return b.files.Receipts(path)
}

// OpenReceipt opens one receipt of the message at path; one it does not
// have is backends.ErrNotFound, wherever it is kept.
func (b *Bodies) OpenReceipt(ctx context.Context, path, name string) (io.ReadCloser, error) {
	id, inStore, err := b.where(path, "receipts")
	switch {
	case err != nil:
		return nil, err
	case inStore:
		return b.store.OpenReceipt(ctx, id, name)
	}
	return b.files.OpenReceipt(path, name)
}
