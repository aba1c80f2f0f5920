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

-- Alarms of a tenant reaching a quota: kind 'quota'.
ALTER TABLE alarms DROP CONSTRAINT alarms_kind_check;
ALTER TABLE alarms ADD CONSTRAINT alarms_kind_check CHECK (kind IN ('run_failed', 'retries_exhausted', 'timed_out', 'not_started', 'executor_lost', 'node_lost', 'misfire', 'app', 'backlog', 'quota'));
