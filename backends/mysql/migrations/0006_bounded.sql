-- Work bounded by the answer, not by the queue: every claim, page, restore,
-- purge and count reads the rows it returns or acts on, and a few more,
-- with a million messages queued. Each statement can run again.

-- Rows migrated from the seed layout have no queue time; a listing's
-- cursor compares it, so every row gets one (backends.Message.QueueTime).
UPDATE emails SET queue_at = CASE status
    WHEN 'READY' THEN COALESCE(due_at, created_at)
    WHEN 'ACCEPTED' THEN created_at
    ELSE updated_at END
WHERE queue_at IS NULL;
ALTER TABLE emails MODIFY queue_at DATETIME(6) NOT NULL;

-- held: the message's batch is suspended (set and cleared with the batch,
-- in the same transaction). claim_held is what claims skip: held while
-- READY. The database keeps it as the status changes, so no transition
-- has to look at the batches.
ALTER TABLE emails ADD COLUMN held TINYINT NOT NULL DEFAULT 0;
ALTER TABLE emails ADD COLUMN claim_held TINYINT AS (IF(status = 'READY', held, 0)) STORED;
UPDATE emails e JOIN email_batches b ON b.code = e.batch_code SET e.held = 1 WHERE e.held = 0;

-- Claims and listings by status: equality on status, claim_held and
-- priority, a range on queue_at, read in index order.
CREATE INDEX idx_claim ON emails (status, claim_held, priority, queue_at, created_at, id);
-- Restore reads only the working rows whose lease ran out.
CREATE INDEX idx_status_lease ON emails (status, lease_until);
-- Superseded by the two above.
DROP INDEX idx_queue ON emails;
DROP INDEX idx_lease ON emails;
DROP INDEX idx_status ON emails;

-- Event claims read pending events in the order they are claimed.
CREATE INDEX idx_state_due_seq ON email_events (state, due_at, seq);
DROP INDEX idx_state_due ON email_events;

-- How many messages each status holds, kept in the transaction of every
-- change; a status has several rows (shards), summed when read, so that
-- concurrent writers rarely wait on the same row.
CREATE TABLE IF NOT EXISTS email_counts (
    status VARCHAR(50) NOT NULL,
    shard TINYINT UNSIGNED NOT NULL,
    n BIGINT NOT NULL,
    PRIMARY KEY (status, shard)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
DELETE FROM email_counts;
INSERT INTO email_counts (status, shard, n) SELECT status, 0, COUNT(*) FROM emails GROUP BY status;
