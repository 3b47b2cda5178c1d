// Command mxrig is the loopback world of the MX delivery benchmarks
// (contrib/bench/load.sh -x, contrib/bench/sites.sh): a DNS server that
// answers the recipient domains' MX and the MX hosts' A records, a sink of
// MX hosts on many 127.0.0.x addresses of one port that counts the sessions
// open at once on each address, and a load generator that sends to many
// recipient domains.
//
//	mxrig dns  -zone FILE                      # zone-file lines; prints its IP:port
//	mxrig sink -port 0 127.0.1.1 127.0.1.2 ... # prints its port; its report on SIGTERM
//	mxrig send -s 20 -m 10000 -domains 1000 -to 'user@d%d.test' 127.0.0.1:2525
//
// dns and sink are the tests' own servers (internal/testrig/dnstest and
// smtptest), so that the benchmarks' DNS and MX hosts behave as those the
// relay's tests prove it against. They run until SIGTERM or SIGINT.
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
)

const usage = `usage: mxrig dns|sink|send [flags]
  mxrig dns  -zone FILE
  mxrig sink [-port N] IP...
  mxrig send [-s 20] [-m 10000] [-l 4096] [-domains 1000] [-to user@d%d.test] [-from app@example.com] HOST:PORT
mxrig CMD -h lists CMD's flags`

func main() {
	log.SetFlags(0)
	if len(os.Args) < 2 {
		log.Fatal(strings.TrimSpace(usage))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "dns":
		err = dnsCmd(ctx, args, os.Stdout)
	case "sink":
		err = sinkCmd(ctx, args, os.Stdout)
	case "send":
		err = sendCmd(ctx, args, os.Stdout)
	default:
		log.Fatal(strings.TrimSpace(usage))
	}
	if err != nil {
		log.Fatalf("mxrig %s: %v", os.Args[1], err)
	}
}

// exitTB lets a command run the test rigs' servers, which report a failure
// to a testing.TB: here a failure ends the command. The rigs call Helper,
// Fatal, Fatalf and Cleanup only (any other method would panic on the nil
// TB embedded); their cleanups are left to the process's exit.
type exitTB struct{ testing.TB }

func (exitTB) Helper()                   {}
func (exitTB) Fatal(args ...any)         { log.Fatal(args...) }
func (exitTB) Fatalf(f string, a ...any) { log.Fatalf(f, a...) }
func (exitTB) Cleanup(func())            {}
