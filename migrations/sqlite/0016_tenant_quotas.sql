-- Per-tenant quotas, set by operators. NULL means unlimited. Each is a positive integer:
--   max_concurrent_runs   runs claimed or running at once
--   max_fires_per_second  the refill rate of the tenant's token bucket of fires (runs started
--                         or triggered); the bucket holds fire_burst tokens (default: the rate)
--   fire_burst            how many fires may happen at once after a quiet spell (only with a rate)
--   max_tasks             tasks the tenant may have
--   max_waiting_runs      runs due and not yet claimed (pending, due_at <= now)
ALTER TABLE tenants ADD COLUMN max_concurrent_runs BIGINT
    CHECK (max_concurrent_runs IS NULL OR max_concurrent_runs > 0);
ALTER TABLE tenants ADD COLUMN max_fires_per_second BIGINT
    CHECK (max_fires_per_second IS NULL OR max_fires_per_second > 0);
ALTER TABLE tenants ADD COLUMN fire_burst BIGINT
    CHECK (fire_burst IS NULL OR fire_burst > 0);
ALTER TABLE tenants ADD COLUMN max_tasks BIGINT
    CHECK (max_tasks IS NULL OR max_tasks > 0);
ALTER TABLE tenants ADD COLUMN max_waiting_runs BIGINT
    CHECK (max_waiting_runs IS NULL OR max_waiting_runs > 0);

-- Alarms of a tenant reaching a quota: kind 'quota'. SQLite cannot change a CHECK constraint,
-- so `alarms` is rebuilt as in 0010 (with the two tables whose foreign keys point at it, and
-- every index on them, 0011's `alarms_run` included). Rows and ids stay as they were.
CREATE TABLE alarms_new (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id        BIGINT REFERENCES tenants (id) ON DELETE CASCADE,
    kind             TEXT NOT NULL CHECK (kind IN ('run_failed', 'retries_exhausted', 'timed_out', 'not_started', 'executor_lost', 'node_lost', 'misfire', 'app', 'backlog', 'quota')),
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
    repeat_of        BIGINT REFERENCES alarms_new (id) ON DELETE CASCADE
);
INSERT INTO alarms_new (id, tenant_id, kind, severity, task_id, run_id, executor_id, node_id,
        message, details, dedupe_key, created_at, published_at, acknowledged_at,
        acknowledged_by, muted, count, last_seen, resolved_at, repeat_of)
    SELECT id, tenant_id, kind, severity, task_id, run_id, executor_id, node_id,
        message, details, dedupe_key, created_at, published_at, acknowledged_at,
        acknowledged_by, muted, count, last_seen, resolved_at, repeat_of
    FROM alarms ORDER BY id;

CREATE TABLE alarm_events_new (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    alarm_id      BIGINT NOT NULL REFERENCES alarms_new (id) ON DELETE CASCADE,
    tenant_id     BIGINT REFERENCES tenants (id) ON DELETE CASCADE,
    event         TEXT NOT NULL CHECK (event IN ('raised', 'repeated', 'acknowledged', 'resolved')),
    alarm         TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    published_at  BIGINT
);
INSERT INTO alarm_events_new (id, alarm_id, tenant_id, event, alarm, created_at, published_at)
    SELECT id, alarm_id, tenant_id, event, alarm, created_at, published_at
    FROM alarm_events ORDER BY id;

CREATE TABLE notification_deliveries_new (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    channel_id       BIGINT NOT NULL REFERENCES notification_channels (id) ON DELETE CASCADE,
    tenant_id        BIGINT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    alarm_id         BIGINT NOT NULL REFERENCES alarms_new (id) ON DELETE CASCADE,
    state            TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  BIGINT NOT NULL,
    last_status      INTEGER,
    last_error       TEXT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    delivered_at     BIGINT,
    UNIQUE (channel_id, alarm_id)
);
INSERT INTO notification_deliveries_new (id, channel_id, tenant_id, alarm_id, state, attempts,
        next_attempt_at, last_status, last_error, created_at, updated_at, delivered_at)
    SELECT id, channel_id, tenant_id, alarm_id, state, attempts,
        next_attempt_at, last_status, last_error, created_at, updated_at, delivered_at
    FROM notification_deliveries ORDER BY id;

DROP TABLE notification_deliveries;
DROP TABLE alarm_events;
DROP TABLE alarms;
ALTER TABLE alarms_new RENAME TO alarms;
ALTER TABLE alarm_events_new RENAME TO alarm_events;
ALTER TABLE notification_deliveries_new RENAME TO notification_deliveries;

CREATE INDEX alarms_unpublished ON alarms (id) WHERE published_at IS NULL AND muted = FALSE;
CREATE INDEX alarms_tenant_created ON alarms (tenant_id, created_at);
CREATE INDEX alarms_open_by_task ON alarms (task_id, kind)
    WHERE resolved_at IS NULL AND repeat_of IS NULL;
CREATE INDEX alarm_events_unpublished ON alarm_events (id) WHERE published_at IS NULL;
CREATE INDEX alarm_events_alarm ON alarm_events (alarm_id);
CREATE INDEX notification_deliveries_due ON notification_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX notification_deliveries_channel ON notification_deliveries (channel_id, id);
CREATE INDEX alarms_run ON alarms (run_id) WHERE run_id IS NOT NULL;
