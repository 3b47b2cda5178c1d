package relay

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/genropy/postino/relay/delivery"
	"github.com/genropy/postino/relay/intake"
	"github.com/genropy/postino/relay/mtasts"
	"github.com/genropy/postino/relay/tlsrpt"
)

// tlsrptFlush is how often a relay writes its TLS report counts to the
// outbox; delivery.tls.reports.delay leaves the last ones time to land.
const tlsrptFlush = time.Minute

// mxTLS are MX delivery's TLS policies: delivery.tls.policies, and the
// recipient domains' MTA-STS policies, kept in the outbox for every relay
// sharing it, unless delivery.tls.mta_sts.enabled is off.
func (r *Relay) mxTLS(res delivery.Resolver) (*delivery.TLSPolicies, error) {
	pol, err := r.cfg.tlsPolicies(os.Getenv)
	m := r.cfg.Delivery.TLS.MTASTS
	if err != nil || !m.Enabled {
		return pol, err
	}
	txt, ok := res.(mtasts.Resolver)
	if !ok {
		return nil, fmt.Errorf("delivery.tls.mta_sts: the resolver of MX delivery (%T) cannot answer TXT questions", res)
	}
	pol.UseMTASTS(mtasts.New(mtasts.Options{Roots: pol.Roots(), Port: m.Port, Timeout: m.Timeout.D(), Recheck: m.Recheck.D()},
		txt, r.outbox, r.log))
	return pol, nil
}

// tlsReports counts the MX sessions' TLS results for TLS reports, and
// makes the reporter that sends them, when delivery.tls.reports.enabled.
// The relay's owner name keys its counts and its turn at reporting.
func (r *Relay) tlsReports(res delivery.Resolver, pol *delivery.TLSPolicies) {
	c := r.cfg.Delivery.TLS.Reports
	txt, ok := res.(tlsrpt.Resolver)
	if !c.Enabled || !ok {
		return
	}
	r.tally = tlsrpt.NewTally(r.owner(), c.Period.D(), r.outbox, r.log)
	pol.ReportTo(r.tally)
	r.reporter = tlsrpt.NewReporter(tlsrpt.Options{Organization: c.Organization, Contact: c.Contact, Owner: r.owner(),
		Period: c.Period.D(), Delay: c.Delay.D(), Lease: 10 * time.Minute, Roots: pol.Roots(), Timeout: time.Minute},
		r.outbox, r.tally, txt, reportMailer{r.intake}, r.log)
}

// reportCheck is how often the relays look for a report due: a few times
// a window.
func (c *TLSReportsConfig) reportCheck() time.Duration {
	return min(5*time.Minute, c.Period.D()/4)
}

// reportMailer takes the mailed TLS reports into the outbox, as the
// relay's own mail, to be delivered as any other is.
type reportMailer struct{ srv *intake.Server }

func (m reportMailer) Mail(ctx context.Context, from string, to []string, msg []byte) error {
	env := intake.Envelope{From: from, To: to, Helo: "tls-reports", Protocol: "local"}
	if err := m.srv.CheckEnvelope(env, int64(len(msg))); err != nil {
		return err
	}
	_, err := m.srv.Take(ctx, env, bytes.NewReader(msg))
	return err
}
