-- A session write's fence read from an index (SPEC W1, issue 43). Each
-- statement of a journal group committed in one round trip checks that
-- the session row still stands at the record and cursor the write began
-- from; `journal_seq` sits after the row's feed snapshot, so reading it
-- from the table walks that snapshot's overflow pages once a statement.
-- This index holds all three: the check never reads the table.
CREATE INDEX planner_sessions_fence ON planner_sessions (id, journal_seq, cursor);
