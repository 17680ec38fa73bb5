-- Planner sessions for applications (SPEC U1–U6, E1–E3) (SQLite): each
-- session's snapshot at its cursor and its event log. The snapshot is the
-- fold of every event up to `cursor`; events behind it are pruned to a
-- bound, and a reader whose cursor was pruned is told to resync.
CREATE TABLE planner_sessions (
    id TEXT PRIMARY KEY,
    document_id TEXT NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    -- The machine it ran on, so a restarted server can keep it for that
    -- account's next resume.
    machine_id TEXT NOT NULL REFERENCES machines (id) ON DELETE CASCADE,
    cursor BIGINT NOT NULL,
    snapshot TEXT NOT NULL,
    -- The snapshot's state, so a restart finds the sessions still open.
    state TEXT NOT NULL CHECK (state IN ('active', 'disconnected', 'ended')),
    created_at BIGINT NOT NULL
);
CREATE INDEX planner_sessions_document ON planner_sessions (document_id);
CREATE INDEX planner_sessions_state ON planner_sessions (state);

CREATE TABLE session_events (
    session_id TEXT NOT NULL REFERENCES planner_sessions (id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
