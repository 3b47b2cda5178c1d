//go:build !linux

package main

import "os/exec"

// dieWithTest: only Linux has a parent-death signal; elsewhere the
// cleanups alone stop what a test started.
func dieWithTest(*exec.Cmd) {}
