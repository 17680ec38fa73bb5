-- When a document's text last changed and who changed it (issue #14): set
-- in the transaction that commits a person's sync edit or an `edit_plan`
-- (the account, or `planner` for a Planner session's), never by the
-- server's own mirror of decision cards. Null until the first edit.
ALTER TABLE documents ADD COLUMN edited_at BIGINT;
ALTER TABLE documents ADD COLUMN edited_by TEXT;
