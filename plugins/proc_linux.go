package plugins

import (
	"os/exec"
	"syscall"
)

// dieWithRelay has the kernel kill a plugin when the relay dies, even by
// SIGKILL, so that no plugin outlives it.
func dieWithRelay(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
