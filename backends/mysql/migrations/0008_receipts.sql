-- The receipts of messages kept in the outbox itself (spool.store outbox):
-- one row per chunk of a receipt, as in email_bodies, each row carrying the
-- receipt's size and time so that a listing reads no bytes. A receipt's
-- chunks are inserted by one transaction, and deleted with the message's
-- row.
CREATE TABLE IF NOT EXISTS email_receipts (
    email_id CHAR(36) NOT NULL,
    name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    seq INT NOT NULL,
    size BIGINT NOT NULL,
    saved_at DATETIME(6) NOT NULL,
    data MEDIUMBLOB NOT NULL,
    PRIMARY KEY (email_id, name, seq),
    FOREIGN KEY (email_id) REFERENCES emails(id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
