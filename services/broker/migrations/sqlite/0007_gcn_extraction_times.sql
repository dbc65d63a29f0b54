-- A value the built-in circular parser read is as old as the circular that
-- states it: its created_at is the circular's submission time, not the time
-- of the ingest that read it (issue 26). New ingests write it so; this sets
-- the rows stored before.
UPDATE gcn_extractions
SET created_at_ms = (
    SELECT c.created_on_ms FROM gcn_circulars c
    WHERE c.circular_id = gcn_extractions.circular_id
)
WHERE origin = 'ithaca-circular-parser'
  AND tenant_id = ''
  AND circular_id IS NOT NULL
  AND EXISTS (
    SELECT 1 FROM gcn_circulars c WHERE c.circular_id = gcn_extractions.circular_id
  );
