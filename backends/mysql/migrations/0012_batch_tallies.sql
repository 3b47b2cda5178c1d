-- What the brake counted of each batch (backends.BatchTallies): the
-- messages the relays took into it, and its recipients' outcomes that say
-- how good its list is. Every relay sharing the outbox adds to the same
-- row, by an upsert that adds, so that the brake judges the whole batch
-- and not one relay's part of it; tripped and tripped_at say why and when
-- the brake suspended the batch (NULL while it has not). One row a batch:
-- the primary key serves the reads by code and the listing in code order,
-- byte by byte (the binary collation) as the other stores list them.
CREATE TABLE IF NOT EXISTS batch_tallies (
    code VARCHAR(64) NOT NULL PRIMARY KEY,
    messages BIGINT NOT NULL DEFAULT 0,
    sent BIGINT NOT NULL DEFAULT 0,
    hard BIGINT NOT NULL DEFAULT 0,
    complaints BIGINT NOT NULL DEFAULT 0,
    tripped VARCHAR(255) NULL,
    tripped_at DATETIME(6) NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
