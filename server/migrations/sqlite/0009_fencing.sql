-- Fencing (SPEC W3). A document's owner epoch: the task that loads a
-- document takes the next one, and every write of its state names it, so a
-- writer whose epoch moved is refused. (Who holds an SQLite database is
-- said by its lock file, not a table.)
ALTER TABLE documents ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;
