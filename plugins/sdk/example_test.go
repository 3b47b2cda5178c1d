package sdk_test

import (
	"context"
	"log"

	"github.com/genropy/postino/plugins/sdk"
)

// notifier tells the app what became of its mail.
type notifier struct{}

// Outcomes makes the relay call it for these outcomes only; without this
// method a plugin gets them all.
func (notifier) Outcomes() []string { return []string{"SENT", "FAILED", "BOUNCED"} }

// Deliver acknowledges the event by returning nil. An error has the relay
// send the same event, with the same EventID, again later.
func (notifier) Deliver(ctx context.Context, e *sdk.Event) error {
	for _, r := range e.Recipients {
		// Standard error goes to the relay's log; standard output belongs
		// to go-plugin.
		log.Printf("%s to %s: %s (%d %s)", e.MessageID, r.Address, e.Outcome, r.Code, r.Text)
	}
	return nil
}

// A plugin is a program whose main hands its Callback to Serve, which
// answers the relay until the relay stops it.
func Example() {
	sdk.Serve(notifier{})
}
