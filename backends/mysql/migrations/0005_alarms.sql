-- Alarms: a check owed to a message at a time (the receipts of a PEC
-- message, say). A check reads only the alarms that are due.

CREATE TABLE IF NOT EXISTS email_alarms (
    kind VARCHAR(32) NOT NULL,
    email_id CHAR(36) NOT NULL,
    due_at DATETIME(6) NOT NULL,
    PRIMARY KEY (email_id, kind),
    INDEX idx_alarm_due (kind, due_at, email_id),
    FOREIGN KEY (email_id) REFERENCES emails(id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- The PEC messages an older Postino left waiting for receipts
-- (backends.AwaitsPECReceipts) are looked at once now.
INSERT IGNORE INTO email_alarms (kind, email_id, due_at)
SELECT 'pec-receipts', id, UTC_TIMESTAMP(6) FROM emails
WHERE route LIKE 'pec:%' AND status IN ('SENT','CALLING-SENT-CALLBACK','SENT-ACKNOWLEDGED',
    'PEC-ACCEPTED','CALLING-PEC-ACCEPTED-CALLBACK','PEC-ACCEPTED-ACKNOWLEDGED');
