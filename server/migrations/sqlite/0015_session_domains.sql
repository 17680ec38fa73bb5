-- A Planner session's domain snapshot in a table of its own (SPEC W2a,
-- issue 43). In the session's row it was rewritten by every write of the
-- session: SQLite writes a row whole, so each write read the snapshot
-- back from its overflow pages, which grow with the cards a session has
-- opened, to move the few columns the write changes. Here it
-- is written only when a new snapshot is taken.
CREATE TABLE planner_session_domains (
    session_id TEXT PRIMARY KEY REFERENCES planner_sessions (id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    domain TEXT NOT NULL
);

INSERT INTO planner_session_domains (session_id, seq, domain)
    SELECT id, domain_seq, domain FROM planner_sessions WHERE domain IS NOT NULL;

ALTER TABLE planner_sessions DROP COLUMN domain;
ALTER TABLE planner_sessions DROP COLUMN domain_seq;

-- The fence index of 0014 served statements that each checked the fence
-- from a query of many writes; a session write now runs its fenced update
-- first, which reads the row anyway, and keeping the index cost an entry
-- moved on every write.
DROP INDEX planner_sessions_fence;
