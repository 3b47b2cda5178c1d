-- What happened to messages each minute (backends.Activity: accepted,
-- sent, deferred, failed, invalid, bounced), kept in the transaction of
-- every change that makes it, in shards as email_counts is, summed when
-- read: the dashboard's last hour, the same for every relay sharing the
-- outbox and after a restart. The relay's housekeeping deletes the minutes
-- older than two hours (backends.MinutesKept).
CREATE TABLE IF NOT EXISTS email_activity (
    minute TIMESTAMPTZ NOT NULL,
    activity VARCHAR(16) NOT NULL,
    shard SMALLINT NOT NULL,
    n BIGINT NOT NULL,
    PRIMARY KEY (minute, activity, shard)
);
