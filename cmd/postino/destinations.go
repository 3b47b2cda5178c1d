package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/genropy/postino/relay/delivery"
)

func destinationsList(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	asJSON := jsonFlag(fs)
	c, _, err := inv.client(fs)
	if err != nil {
		return err
	}
	list, err := c.Sites(ctx)
	return answer(inv.stdout, *asJSON, list, err, func() error {
		tw := tabwriter.NewWriter(inv.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SITE\tSTATE\tDOMAINS\tQUEUED\tIN FLIGHT\tSESSIONS\tLIMIT NOW\tRATE NOW/MIN")
		for _, s := range list.Sites {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d of %d\t%s\n", s.Key, s.State, len(s.Domains), s.Queued, s.InFlight, s.Sessions,
				s.Now.Sessions, s.Limits.Sessions, perMinuteText(s.Now.MessagesPerMinute))
		}
		return tw.Flush()
	})
}

func destinationsShow(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	asJSON := jsonFlag(fs)
	c, args, err := inv.client(fs, "SITE")
	if err != nil {
		return err
	}
	s, err := c.Site(ctx, args[0])
	return answer(inv.stdout, *asJSON, s, err, func() error { return printSite(inv.stdout, s) })
}

func destinationsSuspend(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	asJSON := jsonFlag(fs)
	d := fs.Duration("for", 0, "how long the site takes no mail (`duration`: 30m, 2h); it ends by itself (required)")
	c, args, err := inv.client(fs, "SITE")
	if err != nil {
		return err
	}
	if *d <= 0 {
		return errors.New("destinations suspend: give --for, how long the site takes no mail (--for 2h); the suspension ends by itself")
	}
	res, err := c.SuspendSite(ctx, args[0], *d)
	return answer(inv.stdout, *asJSON, res, err, func() error {
		_, err := fmt.Fprintf(inv.stdout, "site %s suspended until %s on every relay of the outbox: its mail waits\n",
			res.Site, res.Until.Local().Format("2006-01-02 15:04:05"))
		return err
	})
}

func destinationsResume(ctx context.Context, inv *invocation) error {
	c, args, err := inv.client(inv.flags(), "SITE")
	if err != nil {
		return err
	}
	if err := c.ResumeSite(ctx, args[0]); err != nil {
		return err
	}
	_, err = fmt.Fprintf(inv.stdout, "site %s resumed: its mail goes out as it is claimed\n", args[0])
	return err
}

func perMinuteText(n float64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.4g", n)
}

func printSite(w io.Writer, s delivery.SiteView) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Site:\t%s\n", s.Key)
	fmt.Fprintf(tw, "Rule:\t%s\n", s.Rule)
	fmt.Fprintf(tw, "State:\t%s\n", s.State)
	if s.Why != "" {
		fmt.Fprintf(tw, "Why:\t%s\n", s.Why)
	}
	if s.Until != nil {
		fmt.Fprintf(tw, "Until:\t%s\n", s.Until.Local().Format("2006-01-02 15:04:05"))
	}
	fmt.Fprintf(tw, "Domains:\t%s\n", strings.Join(s.Domains, " "))
	fmt.Fprintf(tw, "Messages:\t%d queued, %d in flight, %d sessions\n", s.Queued, s.InFlight, s.Sessions)
	fmt.Fprintf(tw, "Share:\t%.2f (AIMD: throttling signals cut it, accepted messages grow it back)\n", s.Share)
	if s.FleetSlots != nil {
		fmt.Fprintf(tw, "Fleet:\t%d of its %d session slots held by this relay; its part of the rates follows them\n", *s.FleetSlots, s.Now.Sessions)
	}
	l, n := s.Limits, s.Now
	fmt.Fprintf(tw, "Sessions at once:\t%d now, %d by the rule\n", n.Sessions, l.Sessions)
	fmt.Fprintf(tw, "Messages a minute:\t%s now, %s by the rule\n", perMinuteText(n.MessagesPerMinute), perMinuteText(l.MessagesPerMinute))
	fmt.Fprintf(tw, "Messages an hour:\t%s now, %s by the rule\n", perMinuteText(n.MessagesPerHour), perMinuteText(l.MessagesPerHour))
	fmt.Fprintf(tw, "Connections a minute:\t%s now, %s by the rule\n", perMinuteText(n.ConnectionsPerMinute), perMinuteText(l.ConnectionsPerMinute))
	fmt.Fprintf(tw, "Messages a session:\t%d\n", l.MessagesPerSession)
	fmt.Fprintf(tw, "Max queued:\t%d\n", l.MaxQueued)
	for i, r := range s.Replies {
		label := ""
		if i == 0 {
			label = "Last replies:"
		}
		times := ""
		if r.Times > 1 {
			times = fmt.Sprintf(" (%d times)", r.Times)
		}
		fmt.Fprintf(tw, "%s\t%s %s%s\n", label, r.At.Local().Format(time.TimeOnly), r.Reply, times)
	}
	return tw.Flush()
}
