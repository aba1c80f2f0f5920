-- Retention of finished runs and the per-minute rollups that keep their statistics.
--
-- Each tenant keeps its finished runs for retention_ms after they finished (default 7 days,
-- 1 hour to 3650 days); older ones are deleted once their scheduled minute is rolled up.
ALTER TABLE tenants ADD COLUMN retention_ms BIGINT NOT NULL DEFAULT 604800000
    CHECK (retention_ms BETWEEN 3600000 AND 315360000000);

-- Per task and scheduled minute: finished runs by final state, and log-spaced histograms of
-- their durations and lateness (sparse [[bucket, count], ...], see engine/src/rollup.rs).
CREATE TABLE run_rollups (
    tenant_id      BIGINT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    task_id        BIGINT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    minute         BIGINT NOT NULL,
    succeeded      BIGINT NOT NULL DEFAULT 0,
    failed         BIGINT NOT NULL DEFAULT 0,
    timed_out      BIGINT NOT NULL DEFAULT 0,
    lost           BIGINT NOT NULL DEFAULT 0,
    skipped        BIGINT NOT NULL DEFAULT 0,
    cancelled      BIGINT NOT NULL DEFAULT 0,
    duration_hist  JSONB NOT NULL,
    lateness_hist  JSONB NOT NULL,
    PRIMARY KEY (tenant_id, minute, task_id)
);

-- Per tenant: every minute scheduled before rolled_before is rolled up (and final).
CREATE TABLE rollup_watermarks (
    tenant_id      BIGINT PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    rolled_before  BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL
);

-- Deleting a run sets the references to it to null: these find them without a scan per
-- deleted run (only chain runs, alarms of a run and triggered runs have them).
CREATE INDEX runs_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX alarms_run ON alarms (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX trigger_keys_run ON trigger_keys (run_id);
