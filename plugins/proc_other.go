//go:build !linux

package plugins

import "os/exec"

func dieWithRelay(*exec.Cmd) {}
