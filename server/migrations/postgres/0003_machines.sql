-- Machines paired to accounts, with their credentials stored as hashes (PostgreSQL).
CREATE TABLE machines (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    credential_hash TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE INDEX machines_by_account ON machines (account_id);
