-- Small documents by key, each until it expires (backends.Documents): what
-- one relay fetched for all (an MTA-STS policy), what each relay counts
-- under a key of its own (a TLS report's counts). The key's "C" collation
-- lists them in byte order, as the other stores do, and lets LIKE 'p%' use
-- the primary key; the index on expires_at serves the put's sweep.
CREATE TABLE IF NOT EXISTS documents (
    doc_key VARCHAR(255) COLLATE "C" NOT NULL PRIMARY KEY,
    value BYTEA NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_documents_expiry ON documents (expires_at);
