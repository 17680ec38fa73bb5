-- Short-lived machine credentials (SPEC L8) (SQLite).
--
-- A machine holds several credentials, each with its expiry: pairing issues
-- one, and every open link is sent fresh ones before the last expires.
-- `expires_at` is NULL only for a credential carried over from
-- `machines.credential_hash` (paired before this migration): its lifetime
-- starts at its next successful link, so a machine paired earlier keeps
-- working and then renews like any other. A revoked machine's credentials
-- are all refused (`machines.revoked_at`); rows that expired over a day ago
-- are pruned when the machine is renewed.
--
-- SQLite cannot drop a UNIQUE column, so `machines` is rebuilt without
-- `credential_hash`. The credentials table refers to the rebuilt table
-- before its rename, which SQLite carries over to the new name; nothing else
-- refers to `machines`, so dropping the old table deletes nothing else.
CREATE TABLE machines_rebuilt (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
INSERT INTO machines_rebuilt (id, account_id, name, created_at, revoked_at)
    SELECT id, account_id, name, created_at, revoked_at FROM machines;

CREATE TABLE machine_credentials (
    credential_hash TEXT PRIMARY KEY,
    machine_id TEXT NOT NULL REFERENCES machines_rebuilt (id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL,
    expires_at BIGINT
);
INSERT INTO machine_credentials (credential_hash, machine_id, created_at, expires_at)
    SELECT credential_hash, id, created_at, NULL FROM machines;

DROP TABLE machines;
ALTER TABLE machines_rebuilt RENAME TO machines;
CREATE INDEX machines_by_account ON machines (account_id);
CREATE INDEX machine_credentials_by_machine ON machine_credentials (machine_id, expires_at);
