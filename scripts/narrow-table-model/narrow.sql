-- The narrow layout: `live_runs` (waiting and running runs: primary key, occurrence key, the
-- claim's index and the running ones) and `run_history` (finished runs, partitioned by id in
-- 50,000-id partitions, with the console's indexes), which retention drops a partition at a time.
-- Same columns as `runs`. Used by run.sh.
-- The columns and check constraints of current.sql's `runs`; ids come from `run_ids`.
\ir current.sql
DROP SEQUENCE IF EXISTS run_ids; CREATE SEQUENCE run_ids;
CREATE TABLE live_runs (LIKE runs INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE live_runs ALTER COLUMN id DROP DEFAULT,
  ADD PRIMARY KEY (id), ADD UNIQUE (task_id, scheduled_at, attempt, shard_index);
DROP TABLE runs;
ALTER TABLE live_runs SET (fillfactor = 50);
CREATE INDEX live_claimable ON live_runs (node_group, app_id, due_at, priority DESC, id) WHERE started_at IS NULL;
CREATE INDEX live_running_app ON live_runs (app_id) WHERE started_at IS NOT NULL;
CREATE INDEX live_running_deadline ON live_runs (deadline_at) WHERE started_at IS NOT NULL;
CREATE TABLE run_history (LIKE live_runs INCLUDING DEFAULTS) PARTITION BY RANGE (id);
ALTER TABLE run_history ADD PRIMARY KEY (id);
CREATE INDEX hist_tenant_id ON run_history (tenant_id, id);
CREATE INDEX hist_tenant_scheduled ON run_history (tenant_id, scheduled_at);
CREATE INDEX hist_task_scheduled ON run_history (task_id, scheduled_at);
CREATE INDEX hist_chain_root ON run_history (chain_root_id) WHERE chain_root_id IS NOT NULL;
CREATE INDEX hist_parent ON run_history (parent_run_id) WHERE parent_run_id IS NOT NULL;
-- Its partitions, run_history_<n> for ids [n * 50,000, (n + 1) * 50,000), are created ahead of
-- the ids and dropped past retention by run.sh.
