-- Console: idempotent manual triggers, muted task alarms, run listing by tenant.

-- An `Idempotency-Key` given with a manual trigger, and the run it created: a repeated request
-- with the same key returns that run instead of creating another.
CREATE TABLE trigger_keys (
    tenant_id   BIGINT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    key         TEXT NOT NULL,
    task_id     BIGINT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    run_id      BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, key)
);

-- A task's alarms are muted (not popped up) until `muted_until`.
CREATE TABLE alarm_mutes (
    task_id      BIGINT PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    tenant_id    BIGINT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    muted_until  BIGINT NOT NULL,
    muted_by     TEXT NOT NULL,
    updated_at   BIGINT NOT NULL
);
CREATE INDEX alarm_mutes_tenant ON alarm_mutes (tenant_id);

-- Run listings page newest first within a tenant (keyset on id).
CREATE INDEX runs_tenant_id ON runs (tenant_id, id);
