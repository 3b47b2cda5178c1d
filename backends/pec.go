package backends

import "strings"

// PEC (Italian certified mail) as the outbox sees it: the route a PEC
// account's messages leave by, and the alarm that watches their receipts.
const (
	// PECRoutePrefix starts the name of a PEC account's delivery route:
	// "pec:" and the account's address.
	PECRoutePrefix = "pec:"
	// AlarmPECReceipts rings when a PEC message's receipts may be late: set
	// when it is SENT, then moved by the overdue check until every receipt
	// it is owed is in, or has been said to be late.
	AlarmPECReceipts = "pec-receipts"
)

// AwaitsPECReceipts reports whether m went through a PEC account and may
// still be owed receipts: the acceptance (SENT) or the deliveries
// (PEC-ACCEPTED), whatever its callback stage. A store adopting an outbox
// that an older Postino left sets the receipts alarm on such a message.
func AwaitsPECReceipts(m *Message) bool {
	if !strings.HasPrefix(m.Route, PECRoutePrefix) {
		return false
	}
	for _, waiting := range []Status{StatusSent, StatusPECAccepted} {
		calling, acked, _ := CallbackStatuses(string(waiting))
		if m.Status == waiting || m.Status == calling || m.Status == acked {
			return true
		}
	}
	return false
}
