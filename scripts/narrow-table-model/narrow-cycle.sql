-- One pgbench transaction of the narrow layout: 100 runs inserted, claimed as in
-- current-cycle.sql, locked in id order and moved to `run_history` with their result (a delete
-- from `live_runs` and an insert into the history in one statement).
INSERT INTO live_runs (id, tenant_id, task_id, node_group, scheduled_at, due_at, trigger_kind, state, created_at, app_id)
SELECT s.id, 1, s.id % 1000 + 1, 'default', s.id * 10, s.id * 10, 'schedule', 'pending', s.id * 10, 1
FROM (SELECT nextval('run_ids') AS id FROM generate_series(1, 100)) s;
WITH c AS (UPDATE live_runs SET state = 'claimed', claim_owner = 'bench-node-0', lease_until = due_at + 30000, fence = fence + 1,
  claimed_at = due_at + 1, executor_id = 1, dispatched_at = due_at + 2, dispatch_attempts = 1
WHERE id IN (SELECT id FROM live_runs WHERE node_group = 'default' AND app_id = 1 AND started_at IS NULL
  AND state = 'pending' AND due_at <= currval('run_ids') * 10 ORDER BY due_at, priority DESC, id LIMIT 100 FOR UPDATE SKIP LOCKED) RETURNING id)
SELECT quote_literal(array_agg(id)::text) AS ids FROM c \gset
BEGIN;
SELECT count(*) FROM (SELECT id FROM live_runs WHERE id = ANY(:ids::bigint[]) ORDER BY id FOR UPDATE) l;
WITH moved AS (DELETE FROM live_runs WHERE id = ANY(:ids::bigint[]) RETURNING *)
INSERT INTO run_history SELECT id, tenant_id, task_id, node_group, scheduled_at, due_at, attempt, shard_index, shard_total,
  trigger_kind, 'succeeded', priority, parent_run_id, chain_root_id, params, triggered_by, claim_owner, lease_until, fence,
  executor_id, dispatch_attempts, created_at, claimed_at, dispatched_at, started_at, due_at + 5, deadline_at, 1,
  progress_message, 'null'::jsonb, error, log_tail, cancel_pending_at, app_id FROM moved;
COMMIT;
