-- The suppression list (backends.Suppressions): the addresses the relay
-- must not mail, kept apart from the messages so that an entry outlives
-- the retention that purges the message it came from, and every relay
-- sharing the outbox reads the same list. A message's recipients are
-- looked up by the primary key, all at once; the expiry index serves the
-- pruning, the reason index the listings by reason, the counts index the
-- counts, so that they read an index, not the table, at a million entries. The key and
-- scope compare byte by byte (COLLATE "C"): the key's local part is
-- case-sensitive (backends.SuppressionKey normalises the domain), the
-- listing's order is the other stores', and a prefix is a range of the
-- primary key.
CREATE TABLE IF NOT EXISTS suppressions (
    addr_key VARCHAR(320) COLLATE "C" NOT NULL,
    scope VARCHAR(64) COLLATE "C" NOT NULL,
    address VARCHAR(998) NOT NULL,
    reason VARCHAR(16) NOT NULL,
    message_id VARCHAR(998) NOT NULL,
    code VARCHAR(64) NOT NULL,
    diagnostic TEXT NOT NULL,
    report_id VARCHAR(998) NOT NULL,
    created TIMESTAMPTZ NOT NULL,
    expires TIMESTAMPTZ,
    strikes INT NOT NULL,
    first_strike TIMESTAMPTZ NOT NULL,
    active BOOLEAN NOT NULL,
    changed_by VARCHAR(255) NOT NULL,
    changed TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (addr_key, scope)
);
CREATE INDEX IF NOT EXISTS idx_sup_expiry ON suppressions (active, expires);
CREATE INDEX IF NOT EXISTS idx_sup_reason ON suppressions (active, reason, addr_key, scope);
-- The counts read this one alone, narrow, of the active entries only (its
-- visibility map kept by autovacuum, the list changing little), not the
-- table.
CREATE INDEX IF NOT EXISTS idx_sup_counts ON suppressions (reason) WHERE active;

-- Every change of an entry, kept after the entry is removed: who
-- suppressed an address, who removed it, and why.
CREATE TABLE IF NOT EXISTS suppression_history (
    id BIGSERIAL PRIMARY KEY,
    addr_key VARCHAR(320) COLLATE "C" NOT NULL,
    scope VARCHAR(64) COLLATE "C" NOT NULL,
    at TIMESTAMPTZ NOT NULL,
    action VARCHAR(16) NOT NULL,
    reason VARCHAR(16) NOT NULL,
    changed_by VARCHAR(255) NOT NULL,
    note TEXT NOT NULL,
    message_id VARCHAR(998) NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_suphist_key ON suppression_history (addr_key, id);
