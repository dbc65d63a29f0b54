-- The approval gate is generic (DESIGN §5): a request stores the owning gRPC
-- service and method and the encoded request message (base64), which run
-- as the requester once a person approves. Rows from before hold none.
ALTER TABLE approvals ADD COLUMN service TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN method TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN request TEXT NOT NULL DEFAULT '';
