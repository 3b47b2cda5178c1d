// Package logtest keeps what a component logs, for a test to read while the
// component's goroutines go on writing.
package logtest

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
)

// Buffer is a log's text, safe to write from several goroutines.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Logger logs to a new Buffer as text.
func Logger() (*slog.Logger, *Buffer) {
	b := &Buffer{}
	return slog.New(slog.NewTextHandler(b, nil)), b
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Count is how many times s appears in the log.
func (b *Buffer) Count(s string) int {
	return strings.Count(b.String(), s)
}
