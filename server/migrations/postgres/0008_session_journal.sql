-- Planner sessions as a journal (SPEC W1, W2, W2a): each session's domain
-- events, numbered from 1, committed before anything they report is
-- revealed. A restarted server folds the domain snapshot (`domain`, the
-- session's state at `domain_seq`) and the journal records after it back
-- into the session; records behind the snapshot are pruned.
CREATE TABLE session_journal (
    session_id TEXT NOT NULL REFERENCES planner_sessions (id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    entry TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);

-- The last journal record: every write of a session is fenced on it, so a
-- stale writer is refused, never merged.
ALTER TABLE planner_sessions ADD COLUMN journal_seq BIGINT NOT NULL DEFAULT 0;
-- The domain snapshot and the record it stands at (none before the first).
ALTER TABLE planner_sessions ADD COLUMN domain TEXT;
ALTER TABLE planner_sessions ADD COLUMN domain_seq BIGINT NOT NULL DEFAULT 0;
