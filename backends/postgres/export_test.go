package postgres

import "github.com/genropy/postino/backends/backendtest"

// MigrateTo lets tests make a database of an older schema.
var MigrateTo = migrateTo

// The hot statements, for TestPlans.
var (
	ClaimDueStmt      = claimDueStmt
	ClaimStmt         = claimStmt
	MessageLockStmt   = messageLockStmt
	ListStatusStmt    = listStatusStmt
	ListAllStmt       = listAllStmt
	RestoreStmt       = restoreStmt
	RestoreEventsStmt = restoreEventsStmt
	PurgeStmt         = purgeStmt
	DueAlarmsStmt     = dueAlarmsStmt
	EventPickStmt     = eventPickStmt
	EventLockStmt     = eventLockStmt
	LastSeqStmt       = lastSeqStmt
	HoldBatchStmt     = holdBatchStmt
	ListBatchStmt     = listBatchStmt
	BatchCountsStmt   = batchCountsStmt
	CountsStmt        = stmt{Query: countsQuery}
	MinutesStmt       = minutesStmt
	// SuppressionStmts builds the statements of the suppression list.
	SuppressionStmts = suppressionStmts{}
)

// SetBodyBudget makes the statements of message bytes small, so that a
// test sees them split without sending megabytes.
func SetBodyBudget(s *Store, n int) { s.bodyBudget = n }

// FailNextCommit makes the next COMMIT that lands answer err, as a
// connection lost on its reply would.
func FailNextCommit(s *Store, err error) { s.afterCommit = backendtest.FailOnce(err) }
