package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/genropy/postino/relay/admin"
)

func batchList(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	asJSON := jsonFlag(fs)
	limit := fs.Int("limit", 50, "list at most `n` batches")
	after := fs.String("after", "", "list the batches after this `code` (the last of the previous page)")
	c, _, err := inv.client(fs)
	if err != nil {
		return err
	}
	page, err := c.ListBatches(ctx, *limit, *after)
	return answer(inv.stdout, *asJSON, page, err, func() error {
		tw := tabwriter.NewWriter(inv.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "BATCH\tSTATE\tMESSAGES\tSENT\tFAILED\tBOUNCED\tSUPPRESSED\tWAITING\tHELD\tHARD\tCOMPLAINTS")
		for _, b := range page.Batches {
			p := b.Progress
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", b.Code, batchState(b), p.Messages, p.Sent, p.Failed,
				p.Bounced, p.Suppressed, p.Waiting+p.InFlight, p.Held, percent(b.Brake.HardRate), percent(b.Brake.ComplaintRate))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if page.Next != "" {
			_, err = fmt.Fprintf(inv.stdout, "(more: --after %s)\n", page.Next)
		}
		return err
	})
}

func batchShow(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	asJSON := jsonFlag(fs)
	c, args, err := inv.client(fs, "CODE")
	if err != nil {
		return err
	}
	b, err := c.Batch(ctx, args[0])
	return answer(inv.stdout, *asJSON, b, err, func() error { return printBatch(inv.stdout, b) })
}

func batchCancel(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	asJSON := jsonFlag(fs)
	reason := fs.String("reason", "", "why the batch is cancelled: its messages' apps hear it (required)")
	c, args, err := inv.client(fs, "CODE")
	if err != nil {
		return err
	}
	if *reason == "" {
		return errors.New("batch cancel: give --reason: the apps of the batch's messages are told why they were not sent")
	}
	res, err := c.CancelBatch(ctx, args[0], *reason)
	return answer(inv.stdout, *asJSON, res, err, func() error {
		_, err := fmt.Fprintf(inv.stdout, "batch %s cancelled: %d waiting messages ended FAILED; the batch stays suspended, so that what is on its way is held\n",
			res.Batch, res.Cancelled)
		return err
	})
}

func batchState(b admin.Batch) string {
	switch {
	case b.Tripped != "":
		return "tripped"
	case b.Suspended:
		return "suspended"
	}
	return "active"
}

func percent(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

func printBatch(w io.Writer, b admin.Batch) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p, br := b.Progress, b.Brake
	fmt.Fprintf(tw, "Batch:\t%s\n", b.Code)
	fmt.Fprintf(tw, "State:\t%s\n", batchState(b))
	if b.Tripped != "" {
		fmt.Fprintf(tw, "Why:\t%s (at %s)\n", b.Tripped, b.TrippedAt.Local().Format("2006-01-02 15:04:05"))
	}
	fmt.Fprintf(tw, "Messages:\t%d taken in; %d sent, %d failed, %d bounced, %d suppressed, %d waiting, %d on their way, %d held\n",
		p.Messages, p.Sent, p.Failed, p.Bounced, p.Suppressed, p.Waiting, p.InFlight, p.Held)
	fmt.Fprintf(tw, "Hard verdicts:\t%s (%d of %d tried; stops over %s once %d tried)\n", percent(br.HardRate), br.Hard, br.Sent+br.Hard,
		percent(br.MaxHardRate), br.MinSent)
	fmt.Fprintf(tw, "Complaints:\t%s (%d of %d sent; stops over %s)\n", percent(br.ComplaintRate), br.Complaints, br.Sent, percent(br.MaxComplaintRate))
	if br.Off {
		fmt.Fprintf(tw, "Brake:\toff\n")
	}
	return tw.Flush()
}
