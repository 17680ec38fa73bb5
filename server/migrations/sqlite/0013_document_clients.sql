-- Who owns each Yjs client id in a document (SPEC A3a, issue #36): the
-- account that wrote the id's first struct, or NULL for the server's own
-- writes (the Planner's edits, the mirror of decision cards). Stored in
-- the transaction that stores that first change; an editor's later
-- structs under another account's client id are refused.
CREATE TABLE document_clients (
    document_id TEXT NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    client_id BIGINT NOT NULL,
    account TEXT,
    PRIMARY KEY (document_id, client_id)
);

-- Stored updates a load refused (they break an invariant of the Yjs
-- format, so yrs never saw them) and left out of the document: kept here
-- when compaction replaces the log rows they were among, so nothing stored
-- is dropped unseen.
CREATE TABLE document_refused_updates (
    document_id TEXT NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    revision BIGINT NOT NULL,
    data BLOB NOT NULL,
    reason TEXT NOT NULL,
    PRIMARY KEY (document_id, revision)
);
