-- The number of a message's last event, kept on its row: the transaction
-- that adds events reads it with the lock on the row, which always sees
-- the latest, and numbers the new ones after it (a read of email_events
-- beside the lock sees them as of the statement's start, and missed an
-- event committed while the lock waited).
ALTER TABLE emails ADD COLUMN event_seq INT NOT NULL DEFAULT 0;
UPDATE emails e JOIN (SELECT email_id, MAX(seq) AS last FROM email_events GROUP BY email_id) v ON v.email_id = e.id
SET e.event_seq = v.last WHERE e.event_seq < v.last;
