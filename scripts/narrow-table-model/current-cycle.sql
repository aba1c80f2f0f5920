-- One pgbench transaction of the current layout: 100 runs inserted, claimed (FOR UPDATE SKIP
-- LOCKED, then the claim's write), locked in id order and finished (the result's write). Retention
-- deletes the runs past it between cycles (run.sh).
INSERT INTO runs (id, tenant_id, task_id, node_group, scheduled_at, due_at, trigger_kind, state, created_at, app_id)
SELECT s.id, 1, s.id % 1000 + 1, 'default', s.id * 10, s.id * 10, 'schedule', 'pending', s.id * 10, 1
FROM (SELECT nextval('runs_id_seq') AS id FROM generate_series(1, 100)) s;
WITH c AS (UPDATE runs SET state = 'claimed', claim_owner = 'bench-node-0', lease_until = due_at + 30000, fence = fence + 1,
  claimed_at = due_at + 1, executor_id = 1, dispatched_at = due_at + 2, dispatch_attempts = 1
WHERE id IN (SELECT id FROM runs WHERE node_group = 'default' AND app_id = 1 AND started_at IS NULL AND finished_at IS NULL
  AND state = 'pending' AND due_at <= currval('runs_id_seq') * 10 ORDER BY due_at, priority DESC, id LIMIT 100 FOR UPDATE SKIP LOCKED) RETURNING id)
SELECT quote_literal(array_agg(id)::text) AS ids FROM c \gset
BEGIN;
SELECT count(*) FROM (SELECT id FROM runs WHERE id = ANY(:ids::bigint[]) ORDER BY id FOR UPDATE) l;
UPDATE runs SET state = 'succeeded', finished_at = due_at + 5, progress = 1, output = 'null'::jsonb
WHERE id = ANY(:ids::bigint[]);
COMMIT;
