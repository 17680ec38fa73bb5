-- Short-lived machine credentials (SPEC L8) (PostgreSQL).
--
-- A machine holds several credentials, each with its expiry: pairing issues
-- one, and every open link is sent fresh ones before the last expires.
-- `expires_at` is NULL only for a credential carried over from
-- `machines.credential_hash` (paired before this migration): its lifetime
-- starts at its next successful link, so a machine paired earlier keeps
-- working and then renews like any other. A revoked machine's credentials
-- are all refused (`machines.revoked_at`); rows that expired over a day ago
-- are pruned when the machine is renewed.
CREATE TABLE machine_credentials (
    credential_hash TEXT PRIMARY KEY,
    machine_id TEXT NOT NULL REFERENCES machines (id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL,
    expires_at BIGINT
);
INSERT INTO machine_credentials (credential_hash, machine_id, created_at, expires_at)
    SELECT credential_hash, id, created_at, NULL FROM machines;
ALTER TABLE machines DROP COLUMN credential_hash;
CREATE INDEX machine_credentials_by_machine ON machine_credentials (machine_id, expires_at);
