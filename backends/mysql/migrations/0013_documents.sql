-- Small documents by key, each until it expires (backends.Documents): what
-- one relay fetched for all (an MTA-STS policy), what each relay counts
-- under a key of its own (a TLS report's counts). The key's binary
-- collation lists them in byte order, as the other stores do; the index on
-- expires_at serves the put's sweep of the expired ones.
CREATE TABLE IF NOT EXISTS documents (
    doc_key VARCHAR(255) NOT NULL PRIMARY KEY,
    value MEDIUMBLOB NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    KEY idx_documents_expiry (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
