-- Accounts, tokens, documents, members and the document update log (PostgreSQL).
CREATE TABLE accounts (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL
);

CREATE TABLE tokens (
    hash TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL
);

CREATE TABLE documents (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    owner_id TEXT NOT NULL REFERENCES accounts (id),
    revision BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL
);

CREATE TABLE members (
    document_id TEXT NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('owner', 'editor', 'viewer')),
    PRIMARY KEY (document_id, account_id)
);
CREATE INDEX members_by_account ON members (account_id);

-- One row per published change; `revision` is the document revision it made.
CREATE TABLE document_updates (
    document_id TEXT NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    revision BIGINT NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (document_id, revision)
);

-- The compacted state: every update up to and including `revision`.
CREATE TABLE document_snapshots (
    document_id TEXT PRIMARY KEY REFERENCES documents (id) ON DELETE CASCADE,
    revision BIGINT NOT NULL,
    data BYTEA NOT NULL
);
