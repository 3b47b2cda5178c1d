package spool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Receipts are kept beside their message, in <message file without
// .eml>.receipts/, as long as the message is: they are evidence (a PEC
// receipt has legal value).
const receiptsSuffix = ".receipts"

func receiptsDir(path string) string {
	return strings.TrimSuffix(path, suffix) + receiptsSuffix
}

// checkReceiptName accepts a receipt file name: one path element.
func checkReceiptName(name string) error {
	if name == "" || name != filepath.Base(name) || !filepath.IsLocal(name) || strings.HasPrefix(name, ".") {
		return fmt.Errorf("spool: receipt name %q is not a plain file name", name)
	}
	return nil
}

// SaveReceipt keeps raw as receipt name of the message at path, durably;
// saving the same name again replaces it with the same bytes.
func (s *Spool) SaveReceipt(path, name string, raw []byte) error {
	if err := checkReceiptName(name); err != nil {
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

// Receipt is one kept receipt.
type Receipt struct {
	Name    string    `json:"name"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"saved_at"`
}

// Receipts lists the receipts kept with the message at path, by name.
func (s *Spool) Receipts(path string) ([]Receipt, error) {
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
	var out []Receipt
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, Receipt{Name: e.Name(), Size: info.Size(), ModTime: info.ModTime()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// OpenReceipt opens one receipt of the message at path.
func (s *Spool) OpenReceipt(path, name string) (*os.File, error) {
	if err := checkReceiptName(name); err != nil {
		return nil, err
	}
	dir, err := s.resolve(receiptsDir(path))
	if err != nil {
		return nil, err
	}
	return os.Open(filepath.Join(dir, name))
}
