-- Bounces: the statuses after delivery, and the cursors of the mailbox
-- pollers (one row per mailbox folder, leased to the relay polling it).

ALTER TABLE emails MODIFY status ENUM(
    'ACCEPTED','INTAKING','READY','PROCESSING',
    'SENT','FAILED','INVALID',
    'CALLING-SENT-CALLBACK','CALLING-FAILED-CALLBACK',
    'SENT-ACKNOWLEDGED','FAILED-ACKNOWLEDGED',
    'CALLING-INVALID-CALLBACK','INVALID-ACKNOWLEDGED',
    'BOUNCED','CALLING-BOUNCED-CALLBACK','BOUNCED-ACKNOWLEDGED'
) NOT NULL;

CREATE TABLE IF NOT EXISTS mailbox_cursors (
    name VARCHAR(255) NOT NULL PRIMARY KEY,
    uid_validity INT UNSIGNED NOT NULL DEFAULT 0,
    last_uid INT UNSIGNED NOT NULL DEFAULT 0,
    owner VARCHAR(255) NOT NULL DEFAULT '',
    lease_until DATETIME(6) NULL,
    updated_at DATETIME(6) NOT NULL
);
