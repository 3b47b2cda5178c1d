package dovecottest

import (
	"os"
	"syscall"
)

// sysProcAttr puts the Dovecot master and all its children in a process
// group of their own, so that they can be signalled together, and has the
// kernel kill the master if the test binary dies without running its
// cleanups (a panic, a timeout), so that no server outlives its test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalAll sends sig to the master and all its children. Told alone, the
// master takes a second to stop and leaves IMAP sessions running after it.
func signalAll(p *os.Process, sig syscall.Signal) error {
	return syscall.Kill(-p.Pid, sig)
}
