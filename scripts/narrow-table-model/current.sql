-- The layout of today: one `runs` table holding waiting, running and finished runs, with the
-- columns, indexes and fillfactor of migrations/postgres (0001-0023). Used by run.sh.
DROP TABLE IF EXISTS runs, live_runs, run_history CASCADE;
CREATE TABLE runs (
 id bigserial PRIMARY KEY, tenant_id bigint NOT NULL, task_id bigint NOT NULL, node_group text NOT NULL,
 scheduled_at bigint NOT NULL, due_at bigint NOT NULL, attempt int NOT NULL DEFAULT 1 CHECK (attempt >= 1),
 shard_index int NOT NULL DEFAULT 0, shard_total int NOT NULL DEFAULT 1, trigger_kind text NOT NULL,
 state text NOT NULL, priority int NOT NULL DEFAULT 0, parent_run_id bigint, chain_root_id bigint, params jsonb,
 triggered_by text, claim_owner text, lease_until bigint, fence bigint NOT NULL DEFAULT 0, executor_id bigint,
 dispatch_attempts int NOT NULL DEFAULT 0, created_at bigint NOT NULL, claimed_at bigint, dispatched_at bigint,
 started_at bigint, finished_at bigint, deadline_at bigint, progress double precision, progress_message text,
 output jsonb, error text, log_tail text NOT NULL DEFAULT '', cancel_pending_at bigint, app_id bigint NOT NULL,
 UNIQUE (task_id, scheduled_at, attempt, shard_index));
ALTER TABLE runs SET (fillfactor = 50);
CREATE INDEX runs_cancel_pending ON runs (cancel_pending_at) WHERE cancel_pending_at IS NOT NULL;
CREATE INDEX runs_chain_root ON runs (chain_root_id) WHERE chain_root_id IS NOT NULL;
CREATE INDEX runs_claimable ON runs (node_group, app_id, due_at, priority DESC, id) WHERE started_at IS NULL AND finished_at IS NULL;
CREATE INDEX runs_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX runs_running_app ON runs (app_id) WHERE started_at IS NOT NULL AND finished_at IS NULL;
CREATE INDEX runs_running_deadline ON runs (deadline_at) WHERE started_at IS NOT NULL AND finished_at IS NULL;
CREATE INDEX runs_tenant_id ON runs (tenant_id, id);
CREATE INDEX runs_tenant_scheduled ON runs (tenant_id, scheduled_at);
