-- Archived documents (SPEC P3): members read them, nobody changes them until the owner unarchives (SQLite).
-- NULL while the document is live; the time it was archived otherwise.
ALTER TABLE documents ADD COLUMN archived_at BIGINT;
