-- Fencing (SPEC W3). A document's owner epoch: the task that loads a
-- document takes the next one, and every write of its state names it, so a
-- writer whose epoch moved is refused.
ALTER TABLE documents ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;

-- Who holds the database: the one `margin serve` that holds the advisory
-- lock describes itself here, so a second one can name it.
CREATE TABLE server_claim (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    holder TEXT NOT NULL,
    claimed_at BIGINT NOT NULL
);
