package main

import (
	"os/exec"
	"syscall"
)

// dieWithTest has the kernel kill a relay process the test started when
// the test binary dies without running its cleanups (a panic, a timeout),
// so that no relay outlives its test holding ports and connections.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
