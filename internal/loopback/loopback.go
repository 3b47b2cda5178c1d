// Package loopback tells whether a name or address stays on this machine.
package loopback

import (
	"net"
	"net/netip"
	"strings"
)

// Host reports whether host, with or without a port and brackets, is
// localhost or a loopback address.
func Host(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.IsLoopback()
}
