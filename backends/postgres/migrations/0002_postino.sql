-- Everything Postino keeps beyond the seed layout, as the MySQL store's
-- migrations 2 to 8 leave it. A migration runs in one transaction.

-- due_at: not before; queue_at: the time claims order by (due_at for READY,
-- created_at for ACCEPTED, the last change otherwise). held: the message's
-- batch is suspended (set and cleared with the batch).
ALTER TABLE emails
    ADD COLUMN IF NOT EXISTS message_id VARCHAR(998),
    ADD COLUMN IF NOT EXISTS priority SMALLINT NOT NULL DEFAULT 2,
    ADD COLUMN IF NOT EXISTS batch_code VARCHAR(64),
    ADD COLUMN IF NOT EXISTS due_at TIMESTAMPTZ,
    ADD COLUMN IF NOT EXISTS queue_at TIMESTAMPTZ,
    ADD COLUMN IF NOT EXISTS attempts INT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS lease_until TIMESTAMPTZ,
    ADD COLUMN IF NOT EXISTS route VARCHAR(64),
    ADD COLUMN IF NOT EXISTS envelope TEXT,
    ADD COLUMN IF NOT EXISTS results TEXT,
    ADD COLUMN IF NOT EXISTS held BOOLEAN NOT NULL DEFAULT false;
UPDATE emails SET queue_at = CASE status
    WHEN 'READY' THEN COALESCE(due_at, created_at)
    WHEN 'ACCEPTED' THEN created_at
    ELSE updated_at END
WHERE queue_at IS NULL;
ALTER TABLE emails ALTER COLUMN queue_at SET NOT NULL;
-- claim_held is what claims skip: held while READY. The database keeps it
-- as the status changes, so no transition has to look at the batches.
ALTER TABLE emails ADD COLUMN IF NOT EXISTS claim_held BOOLEAN
    GENERATED ALWAYS AS (status = 'READY' AND held) STORED;

-- Claims and listings by status: equality on status, claim_held and
-- priority, a range on queue_at, read in index order.
CREATE INDEX IF NOT EXISTS idx_claim ON emails (status, claim_held, priority, queue_at, created_at, id);
-- Restore reads only the working rows whose lease ran out.
CREATE INDEX IF NOT EXISTS idx_status_lease ON emails (status, lease_until);
CREATE INDEX IF NOT EXISTS idx_message_id ON emails (message_id, created_at, id);
CREATE INDEX IF NOT EXISTS idx_batch ON emails (batch_code);
-- The listing of every message, newest first.
CREATE INDEX IF NOT EXISTS idx_created ON emails (created_at, id);
-- Superseded by idx_claim.
DROP INDEX IF EXISTS idx_status;

ALTER TABLE email_statuses ADD COLUMN IF NOT EXISTS details TEXT;

CREATE TABLE IF NOT EXISTS email_batches (
    code VARCHAR(64) PRIMARY KEY,
    suspended_at TIMESTAMPTZ NOT NULL
);

-- The outcomes told to plugins, in order per message.
CREATE TABLE IF NOT EXISTS email_events (
    event_id VARCHAR(36) PRIMARY KEY,
    email_id VARCHAR(36) NOT NULL REFERENCES emails (id) ON DELETE CASCADE,
    seq INT NOT NULL,
    outcome VARCHAR(40) NOT NULL,
    reason TEXT,
    at TIMESTAMPTZ NOT NULL,
    details TEXT,
    state VARCHAR(10) NOT NULL,
    attempts INT NOT NULL DEFAULT 0,
    due_at TIMESTAMPTZ NOT NULL,
    lease_until TIMESTAMPTZ,
    last_error TEXT,
    acked TEXT,
    updated_at TIMESTAMPTZ NOT NULL,
    CONSTRAINT idx_email_seq UNIQUE (email_id, seq)
);
-- Event claims read pending events in the order they are claimed.
CREATE INDEX IF NOT EXISTS idx_state_due_seq ON email_events (state, due_at, seq);
CREATE INDEX IF NOT EXISTS idx_state_lease ON email_events (state, lease_until);
CREATE INDEX IF NOT EXISTS idx_state_updated ON email_events (state, updated_at, event_id);

-- The cursors of the mailbox pollers (one row per mailbox folder, leased
-- to the relay polling it).
CREATE TABLE IF NOT EXISTS mailbox_cursors (
    name VARCHAR(255) PRIMARY KEY,
    uid_validity BIGINT NOT NULL DEFAULT 0,
    last_uid BIGINT NOT NULL DEFAULT 0,
    owner VARCHAR(255) NOT NULL DEFAULT '',
    lease_until TIMESTAMPTZ,
    updated_at TIMESTAMPTZ NOT NULL
);

-- Other names of a message (a PEC provider's identificativo).
CREATE TABLE IF NOT EXISTS message_links (
    link_key VARCHAR(255) PRIMARY KEY,
    email_id VARCHAR(36) NOT NULL REFERENCES emails (id) ON DELETE CASCADE,
    created_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_link_email ON message_links (email_id);

-- A check owed to a message at a time; a check reads only the due ones.
CREATE TABLE IF NOT EXISTS email_alarms (
    kind VARCHAR(32) NOT NULL,
    email_id VARCHAR(36) NOT NULL REFERENCES emails (id) ON DELETE CASCADE,
    due_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (email_id, kind)
);
CREATE INDEX IF NOT EXISTS idx_alarm_due ON email_alarms (kind, due_at, email_id);

-- How many messages each status holds, kept in the transaction of every
-- change; a status has several rows (shards), summed when read, so that
-- concurrent writers rarely wait on the same row.
CREATE TABLE IF NOT EXISTS email_counts (
    status VARCHAR(50) NOT NULL,
    shard SMALLINT NOT NULL,
    n BIGINT NOT NULL,
    PRIMARY KEY (status, shard)
);
DELETE FROM email_counts;
INSERT INTO email_counts (status, shard, n) SELECT status, 0, COUNT(*) FROM emails GROUP BY status;

-- The bytes of messages kept in the outbox itself (spool.store outbox):
-- one row per chunk, inserted in the transaction that creates the
-- message's row and deleted with it.
CREATE TABLE IF NOT EXISTS email_bodies (
    email_id VARCHAR(36) NOT NULL REFERENCES emails (id) ON DELETE CASCADE,
    seq INT NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (email_id, seq)
);

-- The receipts of messages kept in the outbox itself, in chunks as the
-- bodies, each row carrying the receipt's size and time so that a listing
-- reads no bytes.
CREATE TABLE IF NOT EXISTS email_receipts (
    email_id VARCHAR(36) NOT NULL REFERENCES emails (id) ON DELETE CASCADE,
    name VARCHAR(255) COLLATE "C" NOT NULL,
    seq INT NOT NULL,
    size BIGINT NOT NULL,
    saved_at TIMESTAMPTZ NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (email_id, name, seq)
);
