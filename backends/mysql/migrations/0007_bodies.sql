-- The bytes of messages kept in the outbox itself (spool.store outbox):
-- one row per chunk, each well under max_allowed_packet, inserted in the
-- transaction that creates the message's row and deleted with it.
CREATE TABLE IF NOT EXISTS email_bodies (
    email_id CHAR(36) NOT NULL,
    seq INT NOT NULL,
    data MEDIUMBLOB NOT NULL,
    PRIMARY KEY (email_id, seq),
    FOREIGN KEY (email_id) REFERENCES emails(id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
