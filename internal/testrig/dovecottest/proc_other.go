//go:build !linux

package dovecottest

import (
	"os"
	"syscall"
)

// Dovecot runs on Linux; elsewhere the package only needs to compile.

func sysProcAttr() *syscall.SysProcAttr { return nil }

func signalAll(p *os.Process, sig syscall.Signal) error { return p.Signal(sig) }
