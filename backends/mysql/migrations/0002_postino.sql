-- What Postino needs beyond the seed layout. Each statement stands alone:
-- one that finds its work done (a column or index already there) is
-- skipped, so that an interrupted migration can run again.

ALTER TABLE emails MODIFY status ENUM(
    'ACCEPTED','INTAKING','READY','PROCESSING',
    'SENT','FAILED','INVALID',
    'CALLING-SENT-CALLBACK','CALLING-FAILED-CALLBACK',
    'SENT-ACKNOWLEDGED','FAILED-ACKNOWLEDGED',
    'CALLING-INVALID-CALLBACK','INVALID-ACKNOWLEDGED'
) NOT NULL;

-- Microseconds: claims order by time, and history rows follow each other
-- fast. New time columns are DATETIME(6), in UTC, which reaches past 2038.
ALTER TABLE emails MODIFY created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6);
ALTER TABLE emails MODIFY updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6);
ALTER TABLE email_statuses MODIFY created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6);

ALTER TABLE emails ADD COLUMN message_id VARCHAR(998) NULL;
ALTER TABLE emails ADD COLUMN priority TINYINT NOT NULL DEFAULT 2;
ALTER TABLE emails ADD COLUMN batch_code VARCHAR(64) NULL;
-- due_at: not before; queue_at: the time claims order by (due_at for READY,
-- created_at for ACCEPTED, the last change otherwise).
ALTER TABLE emails ADD COLUMN due_at DATETIME(6) NULL;
ALTER TABLE emails ADD COLUMN queue_at DATETIME(6) NULL;
ALTER TABLE emails ADD COLUMN attempts INT NOT NULL DEFAULT 0;
ALTER TABLE emails ADD COLUMN lease_until DATETIME(6) NULL;
ALTER TABLE emails ADD COLUMN route VARCHAR(64) NULL;
ALTER TABLE emails ADD COLUMN envelope LONGTEXT NULL;
ALTER TABLE emails ADD COLUMN results LONGTEXT NULL;

CREATE INDEX idx_queue ON emails (status, priority, queue_at, created_at);
CREATE INDEX idx_lease ON emails (lease_until);
CREATE INDEX idx_message_id ON emails (message_id(255));
CREATE INDEX idx_batch ON emails (batch_code);
CREATE INDEX idx_created ON emails (created_at);

ALTER TABLE email_statuses ADD COLUMN details LONGTEXT NULL;

CREATE TABLE IF NOT EXISTS email_batches (
    code VARCHAR(64) PRIMARY KEY,
    suspended_at DATETIME(6) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS email_events (
    event_id CHAR(36) PRIMARY KEY,
    email_id CHAR(36) NOT NULL,
    seq INT NOT NULL,
    outcome VARCHAR(40) NOT NULL,
    reason TEXT,
    at DATETIME(6) NOT NULL,
    details LONGTEXT,
    state ENUM('pending','calling','acked','parked') NOT NULL,
    attempts INT NOT NULL DEFAULT 0,
    due_at DATETIME(6) NOT NULL,
    lease_until DATETIME(6) NULL,
    last_error TEXT,
    acked TEXT,
    updated_at DATETIME(6) NOT NULL,

    UNIQUE INDEX idx_email_seq (email_id, seq),
    INDEX idx_state_due (state, due_at),
    INDEX idx_state_lease (state, lease_until),
    INDEX idx_state_updated (state, updated_at),
    FOREIGN KEY (email_id) REFERENCES emails(id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
