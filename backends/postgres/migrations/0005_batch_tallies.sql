-- What the brake counted of each batch (backends.BatchTallies): the
-- messages the relays took into it, and its recipients' outcomes that say
-- how good its list is. Every relay sharing the outbox adds to the same
-- row, by an upsert that adds, so that the brake judges the whole batch
-- and not one relay's part of it; tripped and tripped_at say why and when
-- the brake suspended the batch (NULL while it has not). One row a batch:
-- the primary key serves the reads by code and the listing in code order,
-- byte by byte (COLLATE "C") as the other stores list them.
CREATE TABLE IF NOT EXISTS batch_tallies (
    code VARCHAR(64) COLLATE "C" NOT NULL PRIMARY KEY,
    messages BIGINT NOT NULL DEFAULT 0,
    sent BIGINT NOT NULL DEFAULT 0,
    hard BIGINT NOT NULL DEFAULT 0,
    complaints BIGINT NOT NULL DEFAULT 0,
    tripped VARCHAR(255),
    tripped_at TIMESTAMPTZ
);

-- A batch's messages are listed in id order from a cursor (List with
-- ListQuery.Batch): the index of batches holds the id after the code, so
-- that a page is a range of it, not a sort of the whole batch (InnoDB's
-- secondary indexes end with the primary key already). Only the messages
-- of a batch are in it: every statement on it asks for one code.
DROP INDEX IF EXISTS idx_batch;
CREATE INDEX idx_batch ON emails (batch_code, id) WHERE batch_code IS NOT NULL;
