// Package spool keeps the messages themselves: one .eml file per message,
// written and fsync'd, with its directory entry fsync'd, before the outbox
// row that points at it is committed.
//
// Files live in buckets of one minute, spool/YYYYMMDD/HHMM/, named
// <id>.<nonce>.eml. The bucket keeps concurrent writes in one directory, so a
// single directory fsync covers a whole group of messages; the nonce lets two
// submissions of the same X-Genro-Mail-ID race without touching each other's
// file.
package spool

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/groupcommit"
)

const (
	bucketLayout = "20060102/1504"
	suffix       = ".eml"
)

// Spool is a directory of message files.
type Spool struct {
	dir string
	// dirSyncs is the group commit of directory entries: every directory
	// asked for by the files created while the last fsync ran is synced
	// once for all of them.
	dirSyncs *groupcommit.Committer[string]

	mu      sync.Mutex
	buckets map[string]bool // bucket directories known to exist durably

	// writers keeps the write buffers of finished files for the next ones.
	writers sync.Pool

	// unreadable counts the message files that could not be opened, and
	// keeps the last failure, for the metrics and readiness.
	unreadable  atomic.Uint64
	lastFailure atomic.Pointer[Failure]
}

// Failure is a message file that could not be read.
type Failure struct {
	Path string // as the spool looked for it
	Err  error
	At   time.Time
}

// Unreadable reports how many times a message file could not be opened,
// and the last time.
func (s *Spool) Unreadable() (uint64, *Failure) {
	return s.unreadable.Load(), s.lastFailure.Load()
}

// Open uses dir as the spool, creating it if needed.
func Open(dir string) (*Spool, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("spool: create %s: %w", dir, err)
	}
	s := &Spool{dir: dir, buckets: make(map[string]bool)}
	s.dirSyncs = groupcommit.New(groupcommit.Config{}, syncDirs)
	return s, nil
}

// Dir is the spool's directory.
func (s *Spool) Dir() string { return s.dir }

// Close stops the spool once the commits in progress are done. No File may
// be committed after Close.
func (s *Spool) Close() error {
	s.dirSyncs.Close()
	return nil
}

// File is a message being written. Write to it, then Commit or Abort.
type File struct {
	s   *Spool
	f   *os.File
	w   *bufio.Writer
	rel string
	n   int64
	// dirSynced reports the directory fsync asked for at creation.
	dirSynced *groupcommit.Pending
}

// Create starts the file of a new message received at t.
func (s *Spool) Create(id string, t time.Time) (*File, error) {
	bucket := t.UTC().Format(bucketLayout)
	if err := s.ensureBucket(bucket); err != nil {
		return nil, err
	}
	rel := filepath.Join(bucket, id+"."+backends.Nonce()+suffix)
	f, err := openFile(filepath.Join(s.dir, rel), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	w, _ := s.writers.Get().(*bufio.Writer)
	if w == nil {
		w = bufio.NewWriterSize(f, 32<<10)
	}
	w.Reset(f)
	// The directory entry exists from the open on, so any directory fsync
	// that starts now covers it: asking at once lets it run while the
	// message is received and its data synced, instead of after.
	synced := s.dirSyncs.Submit(context.Background(), filepath.Join(s.dir, bucket))
	return &File{s: s, f: f, w: w, rel: rel, dirSynced: synced}, nil
}

// ensureBucket creates a bucket directory and makes its entry durable in
// its parents, once per bucket.
func (s *Spool) ensureBucket(bucket string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buckets[bucket] {
		return nil
	}
	day, _, _ := strings.Cut(bucket, "/")
	for _, d := range []string{day, bucket} {
		full := filepath.Join(s.dir, d)
		err := os.Mkdir(full, 0o750)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("spool: create bucket %s: %w", d, err)
		}
		if err := syncDir(filepath.Dir(full)); err != nil {
			return fmt.Errorf("spool: sync bucket %s: %w", d, err)
		}
	}
	// Keep the map small: only the buckets of the last minutes matter.
	if len(s.buckets) > 16 {
		clear(s.buckets)
	}
	s.buckets[bucket] = true
	return nil
}

func (f *File) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	f.n += int64(n)
	if err != nil {
		return n, fmt.Errorf("spool: %w", err)
	}
	return n, nil
}

// Size is the number of bytes written so far.
func (f *File) Size() int64 { return f.n }

// Path is the file's path relative to the spool, as the outbox records it.
func (f *File) Path() string { return f.rel }

// Commit makes the file and its directory entry durable and closes it.
// Each caller syncs its own file, so that the disk serves many at once;
// the directory fsync is shared by the files created while it waits. After
// an error the caller must Abort.
func (f *File) Commit() error {
	if err := f.w.Flush(); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	if err := syncData(f.f); err != nil {
		return fmt.Errorf("spool: sync %s: %w", f.rel, err)
	}
	if err := f.dirSynced.Wait(context.Background()); err != nil {
		return fmt.Errorf("spool: sync directory of %s: %w", f.rel, err)
	}
	err := f.f.Close()
	f.f = nil
	f.release()
	if err != nil {
		return fmt.Errorf("spool: close %s: %w", f.rel, err)
	}
	return nil
}

// release gives the write buffer back for another file.
func (f *File) release() {
	if f.w != nil {
		f.w.Reset(nil)
		f.s.writers.Put(f.w)
		f.w = nil
	}
}

// Abort closes and removes the file: nothing of it is left to deliver.
func (f *File) Abort() {
	if f.f != nil {
		f.f.Close()
		f.f = nil
	}
	f.release()
	os.Remove(filepath.Join(f.s.dir, f.rel))
}

// syncDirs fsyncs each directory of a group once.
func syncDirs(dirs []string) []error {
	synced := make(map[string]error, 1)
	errs := make([]error, len(dirs))
	for i, d := range dirs {
		err, done := synced[d]
		if !done {
			err = syncDir(d)
			synced[d] = err
		}
		errs[i] = err
	}
	return errs
}

func syncDir(dir string) error {
	d, err := openFile(dir, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Open opens a message file by the path the outbox recorded: relative to
// the spool, or absolute for rows migrated from a layout that stored
// absolute paths.
// A file that cannot be opened is counted (Unreadable): the relay never
// takes it for a message gone for good, since a missing mount or a
// shared volume's hiccup looks the same.
func (s *Spool) Open(path string) (io.ReadCloser, error) {
	full, err := s.resolve(path)
	if err == nil {
		var f *os.File
		if f, err = openFile(full, os.O_RDONLY, 0); err == nil {
			return f, nil
		}
	}
	if full == "" {
		full = path
	}
	s.failed(full, err)
	return nil, fmt.Errorf("spool: message file %s cannot be read: %w", path, err)
}

// failed counts a message whose bytes could not be read.
func (s *Spool) failed(path string, err error) {
	s.unreadable.Add(1)
	s.lastFailure.Store(&Failure{Path: path, Err: err, At: time.Now()})
}

// Remove deletes a message file and the receipts kept with it; what is
// already gone is no error.
func (s *Spool) Remove(path string) error {
	full, err := s.resolve(path)
	if err != nil {
		return err
	}
	if err := os.Remove(full); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("spool: remove %s: %w", path, err)
	}
	if err := os.RemoveAll(strings.TrimSuffix(full, suffix) + receiptsSuffix); err != nil {
		return fmt.Errorf("spool: remove the receipts of %s: %w", path, err)
	}
	return nil
}

// Exists reports whether a message file is present.
func (s *Spool) Exists(path string) (bool, error) {
	full, err := s.resolve(path)
	if err != nil {
		return false, err
	}
	_, err = os.Stat(full)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, err
}

func (s *Spool) resolve(path string) (string, error) {
	if filepath.IsAbs(path) {
		return path, nil
	}
	if !filepath.IsLocal(path) {
		return "", fmt.Errorf("spool: path %q leaves the spool directory", path)
	}
	return filepath.Join(s.dir, path), nil
}

// Entry is a message file found by Walk.
type Entry struct {
	Path    string // relative to the spool
	ID      string // the message id in its name
	ModTime time.Time
}

// Walk calls fn for every message file in the spool. Files that do not
// follow the spool's naming are left alone.
func (s *Spool) Walk(fn func(Entry) error) error {
	return filepath.WalkDir(s.dir, func(full string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if strings.HasSuffix(d.Name(), receiptsSuffix) {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(s.dir, full)
		if err != nil {
			return err
		}
		id, ok := IDOf(rel)
		if !ok {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		return fn(Entry{Path: rel, ID: id, ModTime: info.ModTime()})
	})
}

// IDOf extracts the message id from a spool file path.
func IDOf(path string) (string, bool) {
	name, ok := strings.CutSuffix(filepath.Base(path), suffix)
	if !ok || len(name) < backends.NonceLen+2 || name[len(name)-backends.NonceLen-1] != '.' {
		return "", false
	}
	return name[:len(name)-backends.NonceLen-1], true
}

// PruneBuckets removes empty bucket directories older than before; the
// current buckets stay, since writers may be about to use them.
func (s *Spool) PruneBuckets(before time.Time) error {
	days, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	for _, day := range days {
		if !day.IsDir() {
			continue
		}
		mins, err := os.ReadDir(filepath.Join(s.dir, day.Name()))
		if err != nil {
			return err
		}
		for _, m := range mins {
			t, err := time.Parse(bucketLayout, day.Name()+"/"+m.Name())
			if err != nil || !t.Before(before) {
				continue
			}
			os.Remove(filepath.Join(s.dir, day.Name(), m.Name())) // fails when not empty
		}
		if t, err := time.Parse("20060102", day.Name()); err == nil && t.AddDate(0, 0, 1).Before(before) {
			os.Remove(filepath.Join(s.dir, day.Name()))
		}
	}
	s.mu.Lock()
	clear(s.buckets)
	s.mu.Unlock()
	return nil
}
