package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emersion/go-smtp"
)

// sendOptions shape a load.
type sendOptions struct {
	addr     string
	sessions int
	messages int
	length   int
	domains  int
	to       string // with %d, the domain's number
	from     string
}

// sendCmd sends -m messages over -s sessions at once to the relay at
// HOST:PORT, message i to one recipient of domain i modulo -domains, and
// prints when the first was accepted (Unix time) and the rate.
func sendCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("send", flag.ExitOnError)
	var o sendOptions
	fs.IntVar(&o.sessions, "s", 20, "sessions at once")
	fs.IntVar(&o.messages, "m", 10000, "messages")
	fs.IntVar(&o.length, "l", 4096, "`bytes` of each message, about")
	fs.IntVar(&o.domains, "domains", 1000, "recipient domains, taken in turn")
	fs.StringVar(&o.to, "to", "user@d%d.test", "recipient; %d is the domain's number, 0 to -domains - 1")
	fs.StringVar(&o.from, "from", "app@example.com", "envelope sender and From")
	fs.Parse(args)
	if fs.NArg() != 1 || o.sessions < 1 || o.messages < 1 || o.domains < 1 || !strings.Contains(o.to, "%d") {
		return errors.New("give the relay's HOST:PORT, -s, -m and -domains of 1 or more, and -to with %d")
	}
	o.addr = fs.Arg(0)
	start := time.Now()
	first, err := send(ctx, o)
	if err != nil {
		return err
	}
	took := time.Since(start)
	fmt.Fprintf(out, "first accepted at %.6f\n", float64(first.UnixNano())/1e9)
	fmt.Fprintf(out, "sent %d in %.2f s = %.0f msg/s\n", o.messages, took.Seconds(), float64(o.messages)/took.Seconds())
	return nil
}

// send runs the load and returns when the first message was accepted.
func send(ctx context.Context, o sendOptions) (time.Time, error) {
	var next, first atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, o.sessions)
	for s := range o.sessions {
		wg.Go(func() {
			errs[s] = session(ctx, o, &next, &first)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return time.Time{}, err
	}
	return time.Unix(0, first.Load()), nil
}

// session sends messages over one connection until next passes the load's
// count, and sets first at its first 250 if no session did before.
func session(ctx context.Context, o sendOptions, next, first *atomic.Int64) error {
	c, err := smtp.Dial(o.addr)
	if err != nil {
		return err
	}
	defer c.Close()
	body := filler(o.length)
	for ctx.Err() == nil {
		i := int(next.Add(1)) - 1
		if i >= o.messages {
			return c.Quit()
		}
		rcpt := fmt.Sprintf(o.to, i%o.domains)
		msg := fmt.Sprintf("From: %s\r\nTo: %s\r\nSubject: mxrig %d\r\n\r\n", o.from, rcpt, i)
		if err := c.SendMail(o.from, []string{rcpt}, io.MultiReader(strings.NewReader(msg), bytes.NewReader(body))); err != nil {
			return fmt.Errorf("message %d to %s: %w", i, rcpt, err)
		}
		first.CompareAndSwap(0, time.Now().UnixNano())
	}
	return ctx.Err()
}

// filler is a body of about n bytes in lines of 78 characters.
func filler(n int) []byte {
	line := strings.Repeat("x", 76) + "\r\n"
	return []byte(strings.Repeat(line, max(1, n/len(line))))
}
