package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	postinooutcome "github.com/genropy/postino/outcome"
	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/admin"
)

// adminFlag adds --admin to a client command.
func adminFlag(fs *flag.FlagSet) *string {
	return fs.String("admin", "", "the relay's admin API `address` (default: admin.listen of the relay's configuration, "+
		"from POSTINO_CONFIG or POSTINO_ADMIN, else 127.0.0.1:8525)")
}

// adminClient talks to the relay at addr, or at the address the relay
// itself listens on, with the token it reads (admin.token_file or
// admin.token_env, from POSTINO_CONFIG or their POSTINO_* twins), so that
// the commands work beside it with its own configuration. A relay
// listening on every address is reached on loopback. Without needToken, a
// token that cannot be read is left out instead of failing: the health
// probe needs none.
func adminClient(addr string, needToken bool) (*admin.Client, error) {
	cfg, err := relay.LoadConfig(os.Getenv("POSTINO_CONFIG"), os.Environ())
	if err != nil {
		return nil, err
	}
	if addr == "" {
		addr = cfg.Admin.Listen
	}
	if host, port, err := net.SplitHostPort(addr); err == nil && (host == "" || host == "0.0.0.0" || host == "::") {
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	token, err := cfg.Admin.Token(os.Getenv)
	if err != nil && needToken {
		return nil, err
	}
	return &admin.Client{Base: addr, Token: token}, nil
}

func queueCmd(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: postino queue needs list, search, show, retry, cancel or receipts", errUsage)
	}
	fs := newFlagSet("queue "+args[0], stdout)
	addr := adminFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	status := fs.String("status", "", "list only messages in this `status`")
	limit := fs.Int("limit", 50, "list at most `n` messages")
	out := fs.String("out", "", "receipts: write them as files into `directory`")
	rest, err := parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	c, err := adminClient(*addr, true)
	if err != nil {
		return err
	}
	switch args[0] {
	case "list":
		if err := wantArgs("queue list", rest); err != nil {
			return err
		}
		page, err := c.List(ctx, *status, *limit, "")
		return answer(stdout, *asJSON, page, err, func() error { printList(stdout, page); return nil })
	case "search":
		if err := wantArgs("queue search", rest, "QUERY"); err != nil {
			return err
		}
		found, err := c.Search(ctx, rest[0])
		return answer(stdout, *asJSON, found, err, func() error {
			if len(found.Messages) == 0 {
				_, err := fmt.Fprintf(stdout, "no message has the id or Message-ID %q, nor, among the newest, that recipient\n", rest[0])
				return err
			}
			printList(stdout, found)
			return nil
		})
	case "show":
		if err := wantArgs("queue show", rest, "ID"); err != nil {
			return err
		}
		m, err := c.Get(ctx, rest[0])
		return answer(stdout, *asJSON, m, err, func() error { printMessage(stdout, m); return nil })
	case "retry", "cancel":
		if err := wantArgs("queue "+args[0], rest, "ID"); err != nil {
			return err
		}
		op := c.Retry
		if args[0] == "cancel" {
			op = c.Cancel
		}
		m, err := op(ctx, rest[0])
		return answer(stdout, *asJSON, m, err, func() error {
			_, err := fmt.Fprintf(stdout, "%s is now %s: %s\n", m.ID, m.Status, m.Reason)
			return err
		})
	case "receipts":
		if err := wantArgs("queue receipts", rest, "ID"); err != nil {
			return err
		}
		return receipts(ctx, c, rest[0], *out, *asJSON, stdout)
	}
	return fmt.Errorf("%w: unknown queue command %q", errUsage, args[0])
}

// answer prints what a command got: JSON for scripts, text for people.
func answer(stdout io.Writer, asJSON bool, v any, err error, text func() error) error {
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, v)
	}
	return text()
}

// receipts lists the receipts kept with a message, or writes them into
// dir, as they came: the evidence of a PEC message.
func receipts(ctx context.Context, c *admin.Client, id, dir string, asJSON bool, stdout io.Writer) error {
	list, err := c.Receipts(ctx, id)
	if err != nil {
		return err
	}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
		for _, r := range list.Receipts {
			b, err := c.Receipt(ctx, id, r.Name)
			if err != nil {
				return err
			}
			path := filepath.Join(dir, r.Name)
			if err := os.WriteFile(path, b, 0o640); err != nil {
				return err
			}
			fmt.Fprintln(stdout, path)
		}
		return nil
	}
	return answer(stdout, asJSON, list, nil, func() error {
		if len(list.Receipts) == 0 {
			_, err := fmt.Fprintf(stdout, "%s has no receipts\n", id)
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RECEIPT\tSIZE\tSAVED")
		for _, r := range list.Receipts {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", r.Name, r.Size, r.SavedAt.Local().Format(time.DateTime))
		}
		return tw.Flush()
	})
}

func batchCmd(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: postino batch needs suspend or activate", errUsage)
	}
	fs := newFlagSet("batch "+args[0], stdout)
	addr := adminFlag(fs)
	rest, err := parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	if err := wantArgs("batch "+args[0], rest, "CODE"); err != nil {
		return err
	}
	c, err := adminClient(*addr, true)
	if err != nil {
		return err
	}
	switch args[0] {
	case "suspend":
		err = c.SuspendBatch(ctx, rest[0])
	case "activate":
		err = c.ActivateBatch(ctx, rest[0])
	default:
		return fmt.Errorf("%w: unknown batch command %q", errUsage, args[0])
	}
	if err != nil {
		return err
	}
	state := map[string]string{"suspend": "suspended: its messages wait", "activate": "activated: its messages go on"}[args[0]]
	fmt.Fprintf(stdout, "batch %s %s\n", rest[0], state)
	return nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printList(w io.Writer, page admin.MessageList) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tPRIO\tATTEMPTS\tCREATED\tSENDER\tRCPTS\tREASON")
	for _, m := range page.Messages {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%d\t%s\n", m.ID, m.Status, m.Priority, m.Attempts,
			m.CreatedAt.Local().Format(time.DateTime), orNull(m.Sender), len(m.Recipients), shorten(m.Reason, 60))
	}
	tw.Flush()
	if page.Next != "" {
		fmt.Fprintln(w, "(more: narrow with --status or raise --limit)")
	}
}

func printMessage(w io.Writer, m admin.Message) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("ID", m.ID)
	row("Message-ID", m.MessageID)
	row("Status", m.Status)
	row("Reason", m.Reason)
	row("Attempts", fmt.Sprint(m.Attempts))
	row("Priority", fmt.Sprint(m.Priority))
	row("Batch", m.Batch)
	row("Route", m.Route)
	row("Due", m.DueAt.Local().Format(time.DateTime))
	row("Created", m.CreatedAt.Local().Format(time.DateTime))
	row("Sender", orNull(m.Sender))
	row("Size", fmt.Sprint(m.Size))
	row("Client", m.Client)
	row("Auth user", m.AuthUser)
	row("Spool file", m.EmlPath)
	tw.Flush()
	fmt.Fprintln(w, "\nRecipients:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	why := bouncedRecipients(m.Events)
	for _, r := range m.Recipients {
		status, reply := r.Status, ""
		if r.Code != 0 {
			reply = strings.TrimSpace(fmt.Sprintf("%d %s %s", r.Code, r.EnhancedCode, r.Text))
		} else {
			reply = r.Text
		}
		if r.Host != "" {
			reply += " (" + r.Host + ")"
		}
		if b, ok := why[strings.ToLower(r.Address)]; ok {
			// Accepted upstream, then bounced: the bounce is what
			// became of it.
			status, reply = "bounced", b
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", r.Address, status, shorten(reply, 100))
	}
	tw.Flush()
	if len(m.Events) > 0 {
		fmt.Fprintln(w, "\nEvents:")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, e := range m.Events {
			line := fmt.Sprintf("  %s\t%s\t%s\ttries %d", e.ID, e.Outcome, e.State, e.Attempts)
			if e.LastError != "" {
				line += "\tlast error: " + shorten(e.LastError, 80)
			}
			fmt.Fprintln(tw, line)
		}
		tw.Flush()
	}
	fmt.Fprintln(w, "\nHistory:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, h := range m.History {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", h.At.Local().Format("2006-01-02 15:04:05.000"), h.Status, h.Reason)
	}
	tw.Flush()
}

// bouncedRecipients maps the recipients the message's BOUNCED events name,
// in lower case, to why they bounced: the event's reason without the
// address it starts with.
func bouncedRecipients(events []admin.Event) map[string]string {
	out := map[string]string{}
	for _, e := range events {
		if e.Outcome != "BOUNCED" {
			continue
		}
		var d struct {
			Bounce postinooutcome.Bounce `json:"bounce"`
		}
		if json.Unmarshal(e.Details, &d) != nil {
			continue
		}
		for _, r := range d.Bounce.Recipients {
			for _, a := range []string{r.FinalRecipient, r.OriginalRecipient} {
				if a != "" {
					_, reason, _ := strings.Cut(e.Reason, ": ")
					out[strings.ToLower(a)] = reason
				}
			}
		}
	}
	return out
}

func orNull(sender string) string {
	if sender == "" {
		return "<>"
	}
	return sender
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func eventsCmd(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: postino events needs list or replay", errUsage)
	}
	fs := newFlagSet("events "+args[0], stdout)
	addr := adminFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	state := fs.String("state", "parked", "list events in this `state`: pending, calling, acked or parked")
	limit := fs.Int("limit", 50, "list at most `n` events")
	rest, err := parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	c, err := adminClient(*addr, true)
	if err != nil {
		return err
	}
	switch args[0] {
	case "list":
		if err := wantArgs("events list", rest); err != nil {
			return err
		}
		list, err := c.Events(ctx, *state, *limit)
		return answer(stdout, *asJSON, list, err, func() error {
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "EVENT\tMESSAGE\tOUTCOME\tSTATE\tTRIES\tLAST ERROR")
			for _, e := range list.Events {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", e.ID, e.MessageID, e.Outcome, e.State, e.Attempts, shorten(e.LastError, 60))
			}
			return tw.Flush()
		})
	case "replay":
		if err := wantArgs("events replay", rest, "ID"); err != nil {
			return err
		}
		e, err := c.Replay(ctx, rest[0])
		return answer(stdout, *asJSON, e, err, func() error {
			_, err := fmt.Fprintf(stdout, "event %s of %s is pending again: the plugins get it next\n", e.ID, e.MessageID)
			return err
		})
	}
	return fmt.Errorf("%w: unknown events command %q", errUsage, args[0])
}
