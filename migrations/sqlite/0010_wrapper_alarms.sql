-- Alarms raised by an app's wrapper (a handler's ctx.alarm, or the wrapper's own
-- "engine unreachable"): kind 'app', with the wrapper's own kind in details.app_kind.
-- SQLite cannot change a CHECK constraint, so the table is rebuilt. With legacy_alter_table
-- on, renaming it leaves the foreign keys of alarm_events, notification deliveries and
-- repeat_of pointing at the name "alarms", which the new table takes; no row of those tables
-- changes.
PRAGMA legacy_alter_table = ON;
ALTER TABLE alarms RENAME TO alarms_before_0010;
CREATE TABLE alarms (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id        BIGINT REFERENCES tenants (id) ON DELETE CASCADE,
    kind             TEXT NOT NULL CHECK (kind IN ('run_failed', 'retries_exhausted', 'timed_out', 'not_started', 'executor_lost', 'node_lost', 'misfire', 'app')),
    severity         TEXT NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
    task_id          BIGINT REFERENCES tasks (id) ON DELETE SET NULL,
    run_id           BIGINT REFERENCES runs (id) ON DELETE SET NULL,
    executor_id      BIGINT REFERENCES executors (id) ON DELETE SET NULL,
    node_id          TEXT,
    message          TEXT NOT NULL,
    details          TEXT NOT NULL,
    dedupe_key       TEXT UNIQUE,
    created_at       BIGINT NOT NULL,
    published_at     BIGINT,
    acknowledged_at  BIGINT,
    acknowledged_by  TEXT,
    muted            BOOLEAN NOT NULL DEFAULT FALSE,
    count            BIGINT NOT NULL DEFAULT 1,
    last_seen        BIGINT,
    resolved_at      BIGINT,
    repeat_of        BIGINT REFERENCES alarms (id) ON DELETE CASCADE
);
INSERT INTO alarms (id, tenant_id, kind, severity, task_id, run_id, executor_id, node_id,
        message, details, dedupe_key, created_at, published_at, acknowledged_at,
        acknowledged_by, muted, count, last_seen, resolved_at, repeat_of)
    SELECT id, tenant_id, kind, severity, task_id, run_id, executor_id, node_id,
        message, details, dedupe_key, created_at, published_at, acknowledged_at,
        acknowledged_by, muted, count, last_seen, resolved_at, repeat_of
    FROM alarms_before_0010 ORDER BY id;
DROP TABLE alarms_before_0010;
PRAGMA legacy_alter_table = OFF;
CREATE INDEX alarms_unpublished ON alarms (id) WHERE published_at IS NULL AND muted = FALSE;
CREATE INDEX alarms_tenant_created ON alarms (tenant_id, created_at);
CREATE INDEX alarms_open_by_task ON alarms (task_id, kind)
    WHERE resolved_at IS NULL AND repeat_of IS NULL;
