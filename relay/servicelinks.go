package relay

import (
	"log/slog"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// Kubernetes sets these variables in every pod of a namespace for each of
// its Services, named after the Service in capitals with "-" as "_"
// (https://kubernetes.io/docs/concepts/services-networking/service/#environment-variables):
// a Service named postino, or postino-something, gives POSTINO_* variables
// that are no settings of the relay.
var (
	// {SVC}_SERVICE_HOST: the Service's cluster IP.
	linkHost = regexp.MustCompile(`^POSTINO(?:_[A-Z0-9_]*[A-Z0-9])?_SERVICE_HOST$`)
	// {SVC}_SERVICE_PORT and {SVC}_SERVICE_PORT_{PORTNAME}: a port.
	linkServicePort = regexp.MustCompile(`^POSTINO(?:_[A-Z0-9_]*[A-Z0-9])?_SERVICE_PORT(?:_[A-Z0-9](?:[A-Z0-9_]*[A-Z0-9])?)?$`)
	// {SVC}_PORT: the first port, as proto://ip:port.
	linkFirstPort = regexp.MustCompile(`^POSTINO(?:_[A-Z0-9_]*[A-Z0-9])?_PORT$`)
	// {SVC}_PORT_{PORT}_{PROTO}, and the same with _PROTO, _PORT or _ADDR.
	linkPort = regexp.MustCompile(`^POSTINO(?:_[A-Z0-9_]*[A-Z0-9])?_PORT_([0-9]+)_(TCP|UDP|SCTP)(?:_(PROTO|PORT|ADDR))?$`)
)

// serviceLink reports whether name=value is a variable Kubernetes sets for
// a Service: its name has one of the shapes above, and its value is what
// Kubernetes puts in it. A name may have two shapes (POSTINO_PORT_2525_TCP_PORT
// is also the first port of a Service named postino-port-2525-tcp): the
// value tells.
func serviceLink(name, value string) bool {
	return linkHost.MatchString(name) && isIP(value) ||
		linkServicePort.MatchString(name) && isPort(value) ||
		linkFirstPort.MatchString(name) && isPortURL(value, "", "") ||
		dockerLink(name, value)
}

// dockerLink reports whether name=value is one of the docker-link
// variables of a Service's port: {SVC}_PORT_{PORT}_{PROTO}, and the same
// with _PROTO, _PORT or _ADDR.
func dockerLink(name, value string) bool {
	m := linkPort.FindStringSubmatch(name)
	if m == nil {
		return false
	}
	port, proto := m[1], strings.ToLower(m[2])
	switch m[3] {
	case "PROTO":
		return value == proto
	case "PORT":
		return value == port && isPort(value)
	case "ADDR":
		return isIP(value)
	}
	return isPortURL(value, proto, port)
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// isPort reports whether s is a port number as Kubernetes writes one.
func isPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n > 0 && n <= 65535 && strconv.Itoa(n) == s
}

// isPortURL reports whether s is proto://ip:port, with the given protocol
// and port when they are not empty; an IPv6 address may come with or
// without brackets, as Kubernetes releases wrote it one way or the other.
func isPortURL(s, proto, port string) bool {
	scheme, hostPort, ok := strings.Cut(s, "://")
	if !ok || (proto != "" && scheme != proto) || (scheme != "tcp" && scheme != "udp" && scheme != "sctp") {
		return false
	}
	i := strings.LastIndexByte(hostPort, ':')
	if i < 0 {
		return false
	}
	host, p := hostPort[:i], hostPort[i+1:]
	if h, _, err := net.SplitHostPort(hostPort); err == nil {
		host = h
	}
	return isIP(host) && isPort(p) && (port == "" || p == port)
}

// logServiceLinks names, in one line, the service-link variables the
// configuration ignored.
func logServiceLinks(log *slog.Logger, names []string) {
	if len(names) > 0 {
		log.Info("ignored the variables Kubernetes sets for a Service named postino: they are no settings "+
			"(enableServiceLinks: false in the pod spec leaves them out)", "variables", strings.Join(names, ","))
	}
}
