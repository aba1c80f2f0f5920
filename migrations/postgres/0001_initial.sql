-- MTHPT initial schema (PostgreSQL).
-- Every instant is stored as BIGINT milliseconds since the Unix epoch (UTC), identically on the
-- SQLite backend, so due/lease comparisons mean the same on both and are always bound from the
-- engine's clock (never the database's).

CREATE TABLE tenants (
    id            BIGSERIAL PRIMARY KEY,
    name          TEXT NOT NULL UNIQUE,
    display_name  TEXT NOT NULL,
    node_group    TEXT NOT NULL DEFAULT 'default',
    disabled      BOOLEAN NOT NULL DEFAULT FALSE,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);

CREATE TABLE users (
    id             BIGSERIAL PRIMARY KEY,
    tenant_id      BIGINT REFERENCES tenants (id) ON DELETE CASCADE,
    username       TEXT NOT NULL UNIQUE,
    password_hash  TEXT NOT NULL,
    role           TEXT NOT NULL CHECK (role IN ('operator', 'tenant_admin', 'tenant_viewer')),
    disabled       BOOLEAN NOT NULL DEFAULT FALSE,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL,
    CHECK ((role = 'operator') = (tenant_id IS NULL))
);
CREATE INDEX users_tenant ON users (tenant_id);

CREATE TABLE api_tokens (
    id            BIGSERIAL PRIMARY KEY,
    user_id       BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    token_hash    TEXT NOT NULL UNIQUE,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT,
    last_used_at  BIGINT,
    revoked_at    BIGINT
);
CREATE INDEX api_tokens_user ON api_tokens (user_id);

CREATE TABLE apps (
    id          BIGSERIAL PRIMARY KEY,
    tenant_id   BIGINT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    secret      TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    UNIQUE (tenant_id, name)
);

CREATE TABLE executors (
    id                 BIGSERIAL PRIMARY KEY,
    tenant_id          BIGINT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    app_id             BIGINT NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    instance_id        TEXT NOT NULL,
    base_url           TEXT NOT NULL,
    capacity           INTEGER NOT NULL CHECK (capacity >= 0),
    running            INTEGER NOT NULL DEFAULT 0,
    handlers           JSONB NOT NULL,
    labels             JSONB NOT NULL,
    state              TEXT NOT NULL CHECK (state IN ('up', 'draining', 'down', 'lost')),
    registered_at      BIGINT NOT NULL,
    last_heartbeat_at  BIGINT NOT NULL,
    UNIQUE (app_id, instance_id)
);
CREATE INDEX executors_tenant ON executors (tenant_id);
CREATE INDEX executors_heartbeat ON executors (last_heartbeat_at) WHERE state IN ('up', 'draining');

CREATE TABLE tasks (
    id                    BIGSERIAL PRIMARY KEY,
    tenant_id             BIGINT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    app_id                BIGINT NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    name                  TEXT NOT NULL,
    description           TEXT NOT NULL DEFAULT '',
    handler               TEXT NOT NULL,
    params                JSONB NOT NULL,
    schedule_kind         TEXT NOT NULL CHECK (schedule_kind IN ('cron', 'fixed_rate', 'fixed_delay', 'once', 'manual')),
    cron_expr             TEXT,
    interval_ms           BIGINT,
    anchor_at             BIGINT,
    timezone              TEXT NOT NULL DEFAULT 'UTC',
    window_start_at       BIGINT,
    window_end_at         BIGINT,
    max_fires             BIGINT,
    fires_scheduled       BIGINT NOT NULL DEFAULT 0,
    misfire_policy        TEXT NOT NULL CHECK (misfire_policy IN ('fire_once_now', 'skip', 'fire_all')),
    misfire_threshold_ms  BIGINT NOT NULL,
    misfire_max_catch_up  INTEGER NOT NULL,
    overlap_policy        TEXT NOT NULL CHECK (overlap_policy IN ('parallel', 'skip', 'serial', 'replace')),
    routing               TEXT NOT NULL CHECK (routing IN ('round_robin', 'random', 'least_busy', 'consistent_hash', 'failover', 'broadcast')),
    timeout_ms            BIGINT,
    start_timeout_ms      BIGINT,
    max_retries           INTEGER NOT NULL,
    retry_backoff_ms      BIGINT NOT NULL,
    retry_backoff_max_ms  BIGINT NOT NULL,
    recover_lost          BOOLEAN NOT NULL,
    priority              INTEGER NOT NULL,
    paused                BOOLEAN NOT NULL DEFAULT FALSE,
    version               BIGINT NOT NULL DEFAULT 1,
    created_at            BIGINT NOT NULL,
    updated_at            BIGINT NOT NULL,
    deleted_at            BIGINT
);
CREATE UNIQUE INDEX tasks_tenant_name ON tasks (tenant_id, name) WHERE deleted_at IS NULL;
CREATE INDEX tasks_app ON tasks (app_id);

CREATE TABLE task_dependencies (
    tenant_id       BIGINT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    parent_task_id  BIGINT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    child_task_id   BIGINT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    condition       TEXT NOT NULL CHECK (condition IN ('on_success', 'on_failure', 'always')),
    created_at      BIGINT NOT NULL,
    PRIMARY KEY (parent_task_id, child_task_id),
    CHECK (parent_task_id <> child_task_id)
);
CREATE INDEX task_dependencies_child ON task_dependencies (child_task_id);

CREATE TABLE runs (
    id                 BIGSERIAL PRIMARY KEY,
    tenant_id          BIGINT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    task_id            BIGINT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    node_group         TEXT NOT NULL,
    scheduled_at       BIGINT NOT NULL,
    due_at             BIGINT NOT NULL,
    attempt            INTEGER NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    shard_index        INTEGER NOT NULL DEFAULT 0,
    shard_total        INTEGER NOT NULL DEFAULT 1,
    trigger_kind       TEXT NOT NULL CHECK (trigger_kind IN ('schedule', 'manual', 'retry', 'chain', 'recovery')),
    state              TEXT NOT NULL CHECK (state IN ('pending', 'claimed', 'running', 'succeeded', 'failed', 'timed_out', 'lost', 'skipped', 'cancelled')),
    priority           INTEGER NOT NULL DEFAULT 0,
    parent_run_id      BIGINT REFERENCES runs (id) ON DELETE SET NULL,
    chain_root_id      BIGINT REFERENCES runs (id) ON DELETE SET NULL,
    params             JSONB,
    triggered_by       TEXT,
    claim_owner        TEXT,
    lease_until        BIGINT,
    fence              BIGINT NOT NULL DEFAULT 0,
    executor_id        BIGINT REFERENCES executors (id) ON DELETE SET NULL,
    dispatch_attempts  INTEGER NOT NULL DEFAULT 0,
    created_at         BIGINT NOT NULL,
    claimed_at         BIGINT,
    dispatched_at      BIGINT,
    started_at         BIGINT,
    finished_at        BIGINT,
    deadline_at        BIGINT,
    progress           DOUBLE PRECISION,
    progress_message   TEXT,
    output             JSONB,
    error              TEXT,
    log_tail           TEXT NOT NULL DEFAULT '',
    -- The split-brain guard: an occurrence (per shard of a broadcast) exists once per attempt.
    UNIQUE (task_id, scheduled_at, attempt, shard_index)
);
-- The claim path: pending runs, and claimed runs whose lease may have expired, by group and due time.
CREATE INDEX runs_claimable ON runs (node_group, due_at) WHERE state IN ('pending', 'claimed');
CREATE INDEX runs_running_deadline ON runs (deadline_at) WHERE state = 'running';
CREATE INDEX runs_running_executor ON runs (executor_id) WHERE state = 'running';
CREATE INDEX runs_task_scheduled ON runs (task_id, scheduled_at);
CREATE INDEX runs_tenant_scheduled ON runs (tenant_id, scheduled_at);
CREATE INDEX runs_chain_root ON runs (chain_root_id) WHERE chain_root_id IS NOT NULL;

CREATE TABLE alarms (
    id               BIGSERIAL PRIMARY KEY,
    tenant_id        BIGINT REFERENCES tenants (id) ON DELETE CASCADE,
    kind             TEXT NOT NULL CHECK (kind IN ('run_failed', 'retries_exhausted', 'timed_out', 'not_started', 'executor_lost', 'node_lost', 'misfire')),
    severity         TEXT NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
    task_id          BIGINT REFERENCES tasks (id) ON DELETE SET NULL,
    run_id           BIGINT REFERENCES runs (id) ON DELETE SET NULL,
    executor_id      BIGINT REFERENCES executors (id) ON DELETE SET NULL,
    node_id          TEXT,
    message          TEXT NOT NULL,
    details          JSONB NOT NULL,
    dedupe_key       TEXT UNIQUE,
    created_at       BIGINT NOT NULL,
    published_at     BIGINT,
    acknowledged_at  BIGINT,
    acknowledged_by  TEXT
);
CREATE INDEX alarms_unpublished ON alarms (id) WHERE published_at IS NULL;
CREATE INDEX alarms_tenant_created ON alarms (tenant_id, created_at);

CREATE TABLE engine_nodes (
    id                 TEXT PRIMARY KEY,
    node_groups        JSONB NOT NULL,
    address            TEXT NOT NULL,
    started_at         BIGINT NOT NULL,
    last_heartbeat_at  BIGINT NOT NULL,
    state              TEXT NOT NULL CHECK (state IN ('up', 'draining', 'stopped', 'lost'))
);

CREATE TABLE audit_events (
    id           BIGSERIAL PRIMARY KEY,
    tenant_id    BIGINT REFERENCES tenants (id) ON DELETE CASCADE,
    actor        TEXT NOT NULL,
    action       TEXT NOT NULL,
    target_kind  TEXT NOT NULL,
    target_id    TEXT,
    details      JSONB NOT NULL,
    at           BIGINT NOT NULL
);
CREATE INDEX audit_events_tenant_at ON audit_events (tenant_id, at);
