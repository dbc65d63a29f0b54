-- What an approval-required call would do, as the owning service's check
-- described it (JSON), shown to the person who decides. Older rows hold
-- none.
ALTER TABLE approvals ADD COLUMN summary TEXT NOT NULL DEFAULT '';
