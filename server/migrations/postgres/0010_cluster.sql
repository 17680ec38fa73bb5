-- Several servers on one database (SPEC C1–C4). Cluster mode only: a
-- single server never reads these tables.

-- The nodes serving the database. A node is live while `expires_at`, on the
-- database's clock (ms since the Unix epoch), is ahead; it renews that
-- itself. One that stops renewing (crash, partition, a pause) loses every
-- document it owns at once.
CREATE TABLE cluster_nodes (
    id TEXT PRIMARY KEY,
    advertise TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    draining BOOLEAN NOT NULL DEFAULT FALSE
);

-- Which node owns each loaded document, and the owner epoch it took
-- (`documents.epoch`, which fences every write of the document's state).
-- A lease holds while its node is live; the row goes when the document
-- unloads.
CREATE TABLE document_leases (
    document_id TEXT PRIMARY KEY REFERENCES documents (id) ON DELETE CASCADE,
    node TEXT NOT NULL,
    epoch BIGINT NOT NULL
);
CREATE INDEX document_leases_by_node ON document_leases (node);

-- What nodes show each other on their internal channel: made by the first
-- node, read by the rest.
CREATE TABLE cluster_secret (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    secret TEXT NOT NULL
);
