package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/genropy/postino/internal/testrig/smtptest"
)

// sinkCmd runs an MX host on each IP, all on one port (-port, or one free
// on every IP), prints the port, and once ctx ends prints its report.
func sinkCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("sink", flag.ExitOnError)
	port := fs.Int("port", 0, "the `port` of every address (delivery.mx_port); 0 finds one free on all")
	fs.Parse(args)
	ips := fs.Args()
	if len(ips) == 0 {
		return fmt.Errorf("give the addresses to listen on (127.0.1.1 127.0.1.2 ...)")
	}
	if *port == 0 {
		*port = smtptest.SharedPort(exitTB{}, ips...)
	}
	hosts := make([]host, len(ips))
	for i, ip := range ips {
		addr := net.JoinHostPort(ip, strconv.Itoa(*port))
		hosts[i] = host{addr: addr, srv: smtptest.Start(exitTB{}, smtptest.Options{Addr: addr})}
	}
	fmt.Fprintln(out, *port)
	<-ctx.Done()
	report(out, hosts)
	return nil
}

// host is one MX host of the sink.
type host struct {
	addr string
	srv  *smtptest.Server
}

// report prints what the hosts received: messages, the distinct ones by
// X-Genro-Mail-ID (the relay gives each message one) and the deliveries
// beyond the first, the sessions, and the most open at once to one host.
func report(out io.Writer, hosts []host) {
	seen := map[string]int{}
	var msgs, noID, sessions, most int
	busiest := "none"
	for _, h := range hosts {
		for _, m := range h.srv.Messages() {
			msgs++
			if id := m.Header("X-Genro-Mail-ID"); id != "" {
				seen[id]++
			} else {
				noID++
			}
		}
		for _, c := range h.srv.Accepted() {
			sessions++
			if c.Open > most {
				most, busiest = c.Open, h.addr
			}
		}
	}
	dup := 0
	for _, n := range seen {
		dup += n - 1
	}
	fmt.Fprintf(out, "sink messages: %d, distinct %d, duplicate deliveries %d, without X-Genro-Mail-ID %d\n", msgs, len(seen), dup, noID)
	fmt.Fprintf(out, "sink sessions: %d to %d hosts; most at once to one host: %d (%s)\n", sessions, len(hosts), most, busiest)
}
