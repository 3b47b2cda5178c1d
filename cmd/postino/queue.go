package main

import (
	"cmp"
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

	"github.com/genropy/postino/backends"
	postinooutcome "github.com/genropy/postino/outcome"
	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/admin"
)

// client adds the flags of the commands that talk to a running relay,
// --admin and --config, to fs, parses them, checks that the arguments
// left are names, and returns a client of the relay's admin API, with the
// relay's token.
func (inv *invocation) client(fs *flag.FlagSet, names ...string) (*admin.Client, []string, error) {
	return inv.clientWith(fs, true, names)
}

// clientWith is client; without needToken, a token that cannot be read
// is left out.
func (inv *invocation) clientWith(fs *flag.FlagSet, needToken bool, names []string) (*admin.Client, []string, error) {
	addr := fs.String("admin", "", "the relay's admin API `address` (default: admin.listen of the configuration, "+
		"or POSTINO_ADMIN, else 127.0.0.1:8525)")
	configPath := configFlag(fs, " whose admin.listen and admin token the relay uses")
	args, err := inv.parseArgs(fs, names...)
	if err != nil {
		return nil, nil, err
	}
	c, err := adminClient(*configPath, *addr, needToken)
	return c, args, err
}

// adminClient talks to the relay at addr, or at the address the relay
// itself listens on, with the token it reads (admin.token_file or
// admin.token_env, from the configuration file or their POSTINO_* twins),
// so that the commands work beside it with its own configuration. A relay
// listening on every address is reached on loopback. Without needToken, a
// token that cannot be read is left out instead of failing: the health
// probe needs none.
func adminClient(configPath, addr string, needToken bool) (*admin.Client, error) {
	cfg, err := relay.LoadConfig(configPath, os.Environ())
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

// jsonFlag adds --json.
func jsonFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("json", false, "print JSON, for scripts")
}

func queueList(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	asJSON := jsonFlag(fs)
	status := fs.String("status", "", "list only messages in this `status`")
	batch := fs.String("batch", "", "list only the messages of this batch `code` (X-Postino-Batch)")
	limit := fs.Int("limit", 50, "list at most `n` messages")
	c, _, err := inv.client(fs)
	if err != nil {
		return err
	}
	page, err := c.List(ctx, admin.ListFilter{Status: *status, Batch: *batch, Limit: *limit})
	return answer(inv.stdout, *asJSON, page, err, func() error { printList(inv.stdout, page); return nil })
}

func queueSearch(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	asJSON := jsonFlag(fs)
	c, args, err := inv.client(fs, "QUERY")
	if err != nil {
		return err
	}
	found, err := c.Search(ctx, args[0])
	return answer(inv.stdout, *asJSON, found, err, func() error {
		if len(found.Messages) == 0 {
			_, err := fmt.Fprintf(inv.stdout, "no message has the id or Message-ID %q, nor, among the newest, that recipient\n", args[0])
			return err
		}
		printList(inv.stdout, found)
		return nil
	})
}

func queueShow(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	asJSON := jsonFlag(fs)
	c, args, err := inv.client(fs, "ID")
	if err != nil {
		return err
	}
	m, err := c.Get(ctx, args[0])
	return answer(inv.stdout, *asJSON, m, err, func() error { printMessage(inv.stdout, m); return nil })
}

func queueRetry(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	now := fs.Bool("now", false, "make it due now, also when the app scheduled it for later (X-Postino-Send-After) and it never left")
	return queueChange(ctx, inv, fs, func(c *admin.Client, ctx context.Context, id string) (admin.Message, error) {
		return c.Retry(ctx, id, *now)
	})
}

func queueCancel(ctx context.Context, inv *invocation) error {
	return queueChange(ctx, inv, inv.flags(), (*admin.Client).Cancel)
}

// queueChange runs op on the message the command names; fs holds the
// command's own flags.
func queueChange(ctx context.Context, inv *invocation, fs *flag.FlagSet, op func(*admin.Client, context.Context, string) (admin.Message, error)) error {
	asJSON := jsonFlag(fs)
	c, args, err := inv.client(fs, "ID")
	if err != nil {
		return err
	}
	m, err := op(c, ctx, args[0])
	return answer(inv.stdout, *asJSON, m, err, func() error {
		_, err := fmt.Fprintf(inv.stdout, "%s is now %s: %s\n", m.ID, m.Status, m.Reason)
		return err
	})
}

func queueReceipts(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	asJSON := jsonFlag(fs)
	out := fs.String("out", "", "write the receipts as files into `directory`")
	c, args, err := inv.client(fs, "ID")
	if err != nil {
		return err
	}
	return receipts(ctx, c, args[0], *out, *asJSON, inv.stdout)
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

func batchSuspend(ctx context.Context, inv *invocation) error {
	return batchChange(ctx, inv, (*admin.Client).SuspendBatch, "suspended: its messages wait")
}

func batchActivate(ctx context.Context, inv *invocation) error {
	return batchChange(ctx, inv, (*admin.Client).ActivateBatch, "activated: its messages go on")
}

// batchChange runs op on the batch the command names.
func batchChange(ctx context.Context, inv *invocation, op func(*admin.Client, context.Context, string) error, state string) error {
	c, args, err := inv.client(inv.flags(), "CODE")
	if err != nil {
		return err
	}
	if err := op(c, ctx, args[0]); err != nil {
		return err
	}
	_, err = fmt.Fprintf(inv.stdout, "batch %s %s\n", args[0], state)
	return err
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
		status := m.Status
		if m.HeldBy != "" {
			status += " (held: batch " + m.HeldBy + " suspended)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%d\t%s\n", m.ID, status, m.Priority, m.Attempts,
			m.CreatedAt.Local().Format(time.DateTime), orNull(m.Sender), len(m.Recipients), shorten(m.Reason, 60))
	}
	tw.Flush()
	if page.Next != "" {
		fmt.Fprintln(w, "(more: narrow with --status or --batch, or raise --limit)")
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
	bounced, strangers := bouncedRecipients(m.Events)
	for _, r := range m.Recipients {
		status, verdict, reply := r.Status, r.Verdict, ""
		if r.Code != 0 {
			reply = strings.TrimSpace(fmt.Sprintf("%d %s %s", r.Code, r.EnhancedCode, r.Text))
		} else {
			reply = r.Text
		}
		if r.Host != "" {
			reply += " (" + r.Host + ")"
		}
		if b, ok := bounced[strings.ToLower(r.Address)]; ok {
			// Accepted upstream, then bounced: the bounce is what
			// became of it.
			status, verdict, reply = "bounced", b.verdict, b.why
		}
		reply = shorten(reply, 100)
		if r.TLS != nil {
			// How the session that carried it was secured, whole.
			reply += " [" + r.TLS.String() + "]"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", r.Address, status, verdict, reply)
	}
	// Addresses a bounce named that the message was not sent to: shown,
	// with no verdict.
	for _, b := range strangers {
		fmt.Fprintf(tw, "  %s\t%s\t\t%s\n", b.address, "bounced, not a recipient", shorten(b.why, 100))
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

// bounceOf is what a BOUNCED event says of one address.
type bounceOf struct {
	address string
	why     string // the event's reason without the address it starts with
	verdict postinooutcome.Verdict
}

// bouncedRecipients maps the recipients the message's BOUNCED events name,
// in lower case, to what the bounce said of them; the addresses a bounce
// named that the message was not sent to come apart, in their order.
func bouncedRecipients(events []admin.Event) (map[string]bounceOf, []bounceOf) {
	out := map[string]bounceOf{}
	var strangers []bounceOf
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
		_, why, _ := strings.Cut(e.Reason, ": ")
		for _, r := range d.Bounce.Recipients {
			if r.NotRecipient {
				strangers = append(strangers, bounceOf{address: cmp.Or(r.OriginalRecipient, r.FinalRecipient), why: why})
				continue
			}
			for _, a := range []string{r.FinalRecipient, r.OriginalRecipient} {
				if a != "" {
					out[strings.ToLower(a)] = bounceOf{address: a, why: why, verdict: r.Verdict}
				}
			}
		}
	}
	return out, strangers
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

// stateFailing is the events list's default: the events the plugins
// refused, parked or still being tried.
const stateFailing = "failing"

func eventsList(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	asJSON := jsonFlag(fs)
	state := fs.String("state", stateFailing, "list events in this `state`: failing (parked, or pending after a failed try), "+
		"pending, calling, acked or parked")
	limit := fs.Int("limit", 50, "list at most `n` events")
	c, _, err := inv.client(fs)
	if err != nil {
		return err
	}
	switch backends.EventState(*state) {
	case stateFailing, backends.EventPending, backends.EventCalling, backends.EventAcked, backends.EventParked:
	default:
		return fmt.Errorf("%w: events list: --state %q: use failing, pending, calling, acked or parked", errUsage, *state)
	}
	var list admin.EventList
	if *state == stateFailing {
		list, err = failingEvents(ctx, c, *limit)
	} else {
		list, err = c.Events(ctx, *state, *limit)
	}
	return answer(inv.stdout, *asJSON, list, err, func() error {
		if len(list.Events) == 0 {
			_, err := fmt.Fprintf(inv.stdout, "no %s events\n", *state)
			return err
		}
		tw := tabwriter.NewWriter(inv.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "EVENT\tMESSAGE\tOUTCOME\tSTATE\tTRIES\tLAST ERROR")
		for _, e := range list.Events {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", e.ID, e.MessageID, e.Outcome, e.State, e.Attempts, shorten(e.LastError, 60))
		}
		return tw.Flush()
	})
}

// maxPendingRead is how many pending events failingEvents reads to find
// the ones tried already: the admin API's largest page.
const maxPendingRead = 1000

// failingEvents lists the parked events, then the pending ones a plugin
// has refused at least once (they wait for their next try), at most limit
// in all.
func failingEvents(ctx context.Context, c *admin.Client, limit int) (admin.EventList, error) {
	list, err := c.Events(ctx, "parked", limit)
	if err != nil || len(list.Events) >= limit {
		return list, err
	}
	pending, err := c.Events(ctx, "pending", maxPendingRead)
	if err != nil {
		return list, err
	}
	for _, e := range pending.Events {
		if len(list.Events) == limit {
			break
		}
		if e.Attempts > 0 {
			list.Events = append(list.Events, e)
		}
	}
	return list, nil
}

func eventsReplay(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	asJSON := jsonFlag(fs)
	c, args, err := inv.client(fs, "ID")
	if err != nil {
		return err
	}
	e, err := c.Replay(ctx, args[0])
	return answer(inv.stdout, *asJSON, e, err, func() error {
		_, err := fmt.Fprintf(inv.stdout, "event %s of %s is pending again: the plugins get it next\n", e.ID, e.MessageID)
		return err
	})
}
