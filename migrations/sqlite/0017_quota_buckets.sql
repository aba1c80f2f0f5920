-- A tenant's bucket of fires (max_fires_per_second), kept in the database so that every engine
-- node and console process takes from the same one: the tokens it held at fire_tokens_at.
-- NULL: full (nothing taken since the rate was set). Claims take a token per run they claim;
-- manual triggers are refused while it is empty.
ALTER TABLE tenants ADD COLUMN fire_tokens REAL;
ALTER TABLE tenants ADD COLUMN fire_tokens_at BIGINT;

-- Open quota episodes, one per tenant and quota: the first refusal (or the first time the
-- watchdog finds runs held back by a quota) opens one and raises its one `quota` alarm; the
-- episode closes, resolving the alarm, once the tenant is back under the quota.
CREATE TABLE quota_episodes (
    tenant_id  BIGINT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    quota      TEXT NOT NULL CHECK (quota IN ('max_concurrent_runs', 'max_fires_per_second', 'max_tasks', 'max_waiting_runs')),
    alarm_key  TEXT NOT NULL,
    opened_at  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, quota)
);
