-- Decision cards: the record of what the Planner asked and what people decided (SQLite).
-- Answers live here, apart from the prose, so rewriting a paragraph never changes them.
CREATE TABLE decision_cards (
    id TEXT PRIMARY KEY,
    document_id TEXT NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    card_key TEXT NOT NULL,
    question TEXT NOT NULL,
    description TEXT,
    response TEXT NOT NULL,
    choices TEXT NOT NULL,
    criteria TEXT NOT NULL,
    anchors TEXT NOT NULL,
    state TEXT NOT NULL,
    answer TEXT,
    answered_by TEXT,
    version BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (document_id, card_key)
);
