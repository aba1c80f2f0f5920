-- Waiting and running runs apart from finished ones.
--
-- `runs` is now partitioned on whether a run has finished: `live_runs` holds the runs that wait
-- or run (pending, claimed, running), `run_history` the finished ones. A result moves its run from
-- the one to the other in the same UPDATE (PostgreSQL moves a row whose partition key changes).
--
-- Why: every run was inserted, claimed, started and finished on the one table that is also the
-- history the console reads, so each of those non-heap-only updates wrote an entry in each of the
-- history's indexes, and the claim's index walked over the dead versions of millions of finished
-- runs until a vacuum of the whole table passed. Now the live runs are a table of thousands of
-- rows with only the indexes the claim, the watchdog and the occurrence key need, which the
-- engine vacuums every few seconds (`VACUUM live_runs` takes milliseconds), and the history's
-- indexes are written once per run, when it finishes.
--
-- What changes for the store:
-- * `runs` keeps its name, columns and queries. A query that says `finished_at IS NULL` reads only
--   `live_runs`; one by id probes both partitions' id indexes.
-- * A partitioned table cannot have a primary key or unique constraint without its partition key,
--   so the id and the occurrence key are unique per partition. Ids come from one sequence. The
--   occurrence key is unique among live runs; an occurrence is inserted only while the task row
--   that makes it is locked (the claim's successors, a chain's children, a retry from its failed
--   attempt, a broadcast's shards from the first shard's fence), so a finished occurrence is not
--   inserted again. `run_history` keeps it unique among finished runs as well.
-- * `INSERT ... ON CONFLICT` names no conflict target (the partitioned table has no unique index
--   to infer one from): the leaf's unique indexes are the arbiters.
-- * Two statements that finish the same run at once (a result and the watchdog's timeout, say):
--   the second no longer re-reads the moved row and matches nothing, it fails with a
--   serialisation failure (40001), which the store treats as transient, like a deadlock: the
--   transaction is tried again and then finds the run finished.
ALTER TABLE runs RENAME TO runs_unpartitioned;
ALTER TRIGGER runs_forget_deleted ON runs_unpartitioned RENAME TO runs_unpartitioned_forget_deleted;

CREATE TABLE runs (LIKE runs_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING COMMENTS)
    PARTITION BY LIST ((finished_at IS NULL));
CREATE TABLE live_runs PARTITION OF runs FOR VALUES IN (true) WITH (fillfactor = 50);
CREATE TABLE run_history PARTITION OF runs FOR VALUES IN (false);
ALTER SEQUENCE runs_id_seq OWNED BY runs.id;

INSERT INTO runs SELECT * FROM runs_unpartitioned;
DROP TABLE runs_unpartitioned;

-- The live runs: their id, their occurrence, the claim's index and the running runs'.
CREATE UNIQUE INDEX live_runs_id ON live_runs (id);
CREATE UNIQUE INDEX live_runs_occurrence ON live_runs (task_id, scheduled_at, attempt, shard_index);
CREATE INDEX runs_claimable ON live_runs (node_group, app_id, due_at, priority DESC, id)
    WHERE started_at IS NULL;
CREATE INDEX runs_running_app ON live_runs (app_id) WHERE started_at IS NOT NULL;
CREATE INDEX runs_running_deadline ON live_runs (deadline_at) WHERE started_at IS NOT NULL;
-- The console's run list of a tenant, its live runs first.
CREATE INDEX live_runs_tenant_id ON live_runs (tenant_id, id);

-- The history: what the console reads and what retention deletes.
CREATE UNIQUE INDEX run_history_id ON run_history (id);
CREATE UNIQUE INDEX run_history_occurrence ON run_history (task_id, scheduled_at, attempt, shard_index);
CREATE INDEX run_history_tenant_id ON run_history (tenant_id, id);
CREATE INDEX run_history_tenant_scheduled ON run_history (tenant_id, scheduled_at);

-- Both: the runs that name another run, and cancel requests still to deliver (a cancelled run
-- has finished; its executor is told after).
CREATE INDEX runs_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX runs_chain_root ON runs (chain_root_id) WHERE chain_root_id IS NOT NULL;
CREATE INDEX runs_cancel_pending ON runs (cancel_pending_at) WHERE cancel_pending_at IS NOT NULL;

-- Deleting runs forgets them, as before; a run moving to the history is not deleted (a moved
-- row fires no statement-level DELETE trigger on `runs`).
CREATE TRIGGER runs_forget_deleted AFTER DELETE ON runs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION runs_forget_deleted();

-- Statistics from the start: the engine renews them with each vacuum of the live runs.
ANALYZE runs;
