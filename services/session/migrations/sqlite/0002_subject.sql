-- The object a person opened the session on (seed 003, DESIGN §5): a kind
-- such as `filter` or `gcn_event` and the object's id. Subject-scoped write
-- tools are offered only inside such a session, and only for that object.
ALTER TABLE sessions ADD COLUMN subject_kind TEXT;
ALTER TABLE sessions ADD COLUMN subject_id TEXT;
