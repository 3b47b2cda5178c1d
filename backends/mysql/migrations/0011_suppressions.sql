-- The suppression list (backends.Suppressions): the addresses the relay
-- must not mail, kept apart from the messages so that an entry outlives
-- the retention that purges the message it came from, and every relay
-- sharing the outbox reads the same list. A message's recipients are
-- looked up by the primary key, all at once; the expiry index serves the
-- pruning, the reason index the counts and the listings by reason, so that
-- they read an index, not the table, at a million entries. The key's local
-- part is case-sensitive (backends.SuppressionKey normalises the domain),
-- hence the binary collation.
CREATE TABLE IF NOT EXISTS suppressions (
    addr_key VARCHAR(320) NOT NULL,
    scope VARCHAR(64) NOT NULL,
    address VARCHAR(998) NOT NULL,
    reason VARCHAR(16) NOT NULL,
    message_id VARCHAR(998) NOT NULL,
    code VARCHAR(64) NOT NULL,
    diagnostic TEXT NOT NULL,
    report_id VARCHAR(998) NOT NULL,
    created DATETIME(6) NOT NULL,
    expires DATETIME(6) NULL,
    strikes INT NOT NULL,
    first_strike DATETIME(6) NOT NULL,
    active BOOLEAN NOT NULL,
    changed_by VARCHAR(255) NOT NULL,
    changed DATETIME(6) NOT NULL,
    PRIMARY KEY (addr_key, scope),
    INDEX idx_sup_expiry (active, expires),
    INDEX idx_sup_reason (active, reason, addr_key, scope)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Every change of an entry, kept after the entry is removed: who
-- suppressed an address, who removed it, and why.
CREATE TABLE IF NOT EXISTS suppression_history (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    addr_key VARCHAR(320) NOT NULL,
    scope VARCHAR(64) NOT NULL,
    at DATETIME(6) NOT NULL,
    action VARCHAR(16) NOT NULL,
    reason VARCHAR(16) NOT NULL,
    changed_by VARCHAR(255) NOT NULL,
    note TEXT NOT NULL,
    message_id VARCHAR(998) NOT NULL,
    INDEX idx_suphist_key (addr_key, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- A message none of whose recipients may be mailed is SUPPRESSED.
ALTER TABLE emails MODIFY status ENUM(
    'ACCEPTED','INTAKING','READY','PROCESSING',
    'SENT','FAILED','INVALID',
    'CALLING-SENT-CALLBACK','CALLING-FAILED-CALLBACK',
    'SENT-ACKNOWLEDGED','FAILED-ACKNOWLEDGED',
    'CALLING-INVALID-CALLBACK','INVALID-ACKNOWLEDGED',
    'BOUNCED','CALLING-BOUNCED-CALLBACK','BOUNCED-ACKNOWLEDGED',
    'PEC-ACCEPTED','CALLING-PEC-ACCEPTED-CALLBACK','PEC-ACCEPTED-ACKNOWLEDGED',
    'PEC-NOT-ACCEPTED','CALLING-PEC-NOT-ACCEPTED-CALLBACK','PEC-NOT-ACCEPTED-ACKNOWLEDGED',
    'PEC-DELIVERED','CALLING-PEC-DELIVERED-CALLBACK','PEC-DELIVERED-ACKNOWLEDGED',
    'PEC-NOT-DELIVERED','CALLING-PEC-NOT-DELIVERED-CALLBACK','PEC-NOT-DELIVERED-ACKNOWLEDGED',
    'SUPPRESSED','CALLING-SUPPRESSED-CALLBACK','SUPPRESSED-ACKNOWLEDGED'
) NOT NULL;
