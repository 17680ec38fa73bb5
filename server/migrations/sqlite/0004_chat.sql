-- A document's Chat: members' messages, the Planner's accepted replies and true lifecycle lines (SQLite).
CREATE TABLE chat_messages (
    id TEXT PRIMARY KEY,
    document_id TEXT NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    author TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('member', 'planner', 'system')),
    body TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (document_id, seq)
);
