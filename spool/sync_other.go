//go:build !linux

package spool

import "os"

func syncData(f *os.File) error { return f.Sync() }

func openFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	return os.OpenFile(name, flag, perm)
}
