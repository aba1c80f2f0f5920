-- A run's columns in the order its writes change them.
--
-- A run's row is written whole twice (inserted waiting, inserted again into the history when it
-- finishes) and rewritten in place once or twice (claimed; started, when the start comes before
-- the result). Two things in the old column order cost WAL on each of those writes:
--
-- * Padding. Eight-byte columns came after text columns (`scheduled_at` after `node_group`,
--   the claim's columns after `state`), so each began with up to seven bytes of padding: a
--   finished run's row was 224 bytes, 15 of them padding.
-- * The claim's rewrite. PostgreSQL logs an in-place update as the bytes between the longest
--   unchanged prefix and the longest unchanged suffix of the row; the claim changes `state`,
--   `claim_owner`, `lease_until`, `fence`, `executor_id` and `claimed_at`, which lay from the
--   11th to the 23rd column with the run's parameters, priority and creation time between them,
--   all logged again with every claim.
--
-- Now: the columns fixed at insertion first, eight-byte ones before four-byte ones; then the
-- texts written once; last the columns the claim and the start change (`fence` … `deadline_at`,
-- then `state` and `claim_owner`), so a claim logs those and nothing else. About 50 bytes of
-- WAL less per run (15 in each whole row, 25 in the claim's rewrite).
--
-- The table is rebuilt as migration 0024 built it (the same partitions, indexes, options,
-- trigger and comment), its rows copied by name. The engine reads a run by position when a row
-- begins with these columns in this order (`RUN_COLUMNS_ON_POSTGRES`, engine/src/run.rs), by
-- name otherwise. SQLite keeps its order (its `runs` is referenced by other tables' foreign keys,
-- which a rebuild there would have to drop).
ALTER TABLE runs RENAME TO runs_before_0028;
ALTER TABLE live_runs RENAME TO live_runs_before_0028;
ALTER TABLE run_history RENAME TO run_history_before_0028;
ALTER TRIGGER runs_forget_deleted ON runs_before_0028 RENAME TO runs_before_0028_forget_deleted;

CREATE TABLE runs (
    -- Fixed at insertion: eight bytes wide, then four.
    id                BIGINT NOT NULL DEFAULT nextval('runs_id_seq'::regclass),
    tenant_id         BIGINT NOT NULL,
    task_id           BIGINT NOT NULL,
    app_id            BIGINT NOT NULL,
    scheduled_at      BIGINT NOT NULL,
    due_at            BIGINT NOT NULL,
    created_at        BIGINT NOT NULL,
    parent_run_id     BIGINT,
    chain_root_id     BIGINT,
    finished_at       BIGINT,
    cancel_pending_at BIGINT,
    progress          DOUBLE PRECISION,
    attempt           INTEGER NOT NULL DEFAULT 1,
    shard_index       INTEGER NOT NULL DEFAULT 0,
    shard_total       INTEGER NOT NULL DEFAULT 1,
    priority          INTEGER NOT NULL DEFAULT 0,
    dispatch_attempts INTEGER NOT NULL DEFAULT 0,
    -- Texts written at insertion or with the result.
    node_group        TEXT NOT NULL,
    trigger_kind      TEXT NOT NULL,
    params            JSONB,
    triggered_by      TEXT,
    progress_message  TEXT,
    output            JSONB,
    error             TEXT,
    log_tail          TEXT NOT NULL DEFAULT '',
    -- What the claim and the start rewrite.
    fence             BIGINT NOT NULL DEFAULT 0,
    executor_id       BIGINT,
    lease_until       BIGINT,
    claimed_at        BIGINT,
    dispatched_at     BIGINT,
    started_at        BIGINT,
    deadline_at       BIGINT,
    state             TEXT NOT NULL,
    claim_owner       TEXT,
    CONSTRAINT runs_attempt_check CHECK (attempt >= 1),
    CONSTRAINT runs_state_check CHECK (state IN ('pending', 'claimed', 'running', 'succeeded',
        'failed', 'timed_out', 'lost', 'skipped', 'cancelled')),
    CONSTRAINT runs_trigger_kind_check CHECK (trigger_kind IN ('schedule', 'manual', 'retry',
        'chain', 'recovery'))
) PARTITION BY LIST ((finished_at IS NULL));
CREATE TABLE live_runs PARTITION OF runs FOR VALUES IN (true)
    WITH (fillfactor = 35, vacuum_truncate = false);
CREATE TABLE run_history PARTITION OF runs FOR VALUES IN (false);
ALTER SEQUENCE runs_id_seq OWNED BY runs.id;
COMMENT ON COLUMN runs.app_id IS
    'The app of the run''s task within the run''s tenant. NOT NULL: a run naming a task of another tenant is refused.';

INSERT INTO runs (id, tenant_id, task_id, app_id, scheduled_at, due_at, created_at,
        parent_run_id, chain_root_id, finished_at, cancel_pending_at, progress, attempt,
        shard_index, shard_total, priority, dispatch_attempts, node_group, trigger_kind, params,
        triggered_by, progress_message, output, error, log_tail, fence, executor_id, lease_until,
        claimed_at, dispatched_at, started_at, deadline_at, state, claim_owner)
    SELECT id, tenant_id, task_id, app_id, scheduled_at, due_at, created_at,
        parent_run_id, chain_root_id, finished_at, cancel_pending_at, progress, attempt,
        shard_index, shard_total, priority, dispatch_attempts, node_group, trigger_kind, params,
        triggered_by, progress_message, output, error, log_tail, fence, executor_id, lease_until,
        claimed_at, dispatched_at, started_at, deadline_at, state, claim_owner
    FROM runs_before_0028;
DROP TABLE runs_before_0028;

-- The indexes of migration 0024, under the same names.
CREATE UNIQUE INDEX live_runs_id ON live_runs (id);
CREATE UNIQUE INDEX live_runs_occurrence ON live_runs (task_id, scheduled_at, attempt, shard_index);
CREATE INDEX runs_claimable ON live_runs (node_group, app_id, due_at, priority DESC, id)
    WHERE started_at IS NULL;
CREATE INDEX runs_running_app ON live_runs (app_id) WHERE started_at IS NOT NULL;
CREATE INDEX runs_running_deadline ON live_runs (deadline_at) WHERE started_at IS NOT NULL;
CREATE INDEX live_runs_tenant_id ON live_runs (tenant_id, id);

CREATE UNIQUE INDEX run_history_id ON run_history (id);
CREATE UNIQUE INDEX run_history_occurrence ON run_history (task_id, scheduled_at, attempt, shard_index);
CREATE INDEX run_history_tenant_id ON run_history (tenant_id, id);
CREATE INDEX run_history_tenant_scheduled ON run_history (tenant_id, scheduled_at);

CREATE INDEX runs_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX runs_chain_root ON runs (chain_root_id) WHERE chain_root_id IS NOT NULL;
CREATE INDEX runs_cancel_pending ON runs (cancel_pending_at) WHERE cancel_pending_at IS NOT NULL;

CREATE TRIGGER runs_forget_deleted AFTER DELETE ON runs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION runs_forget_deleted();

ANALYZE runs;
