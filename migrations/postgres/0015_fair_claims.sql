-- Fair, capacity-aware claims.
--
-- A claim finds the apps with runs waiting in the node's groups (a skip scan of the claim
-- index) with their free capacity, then reads each app's due runs through the same index keyed
-- by group and app, so an app whose executors are full is not read at all and one tenant's
-- backlog never stands in front of another tenant's due runs (docs/engine.md, "Claim order and
-- capacity").
--
-- `runs.app_id` is the app of the run's task, copied on insert (and moved with the task when
-- the task moves to another app). It has no foreign key: the task's already ties the run to
-- the app (deleting an app deletes its tasks and their runs).
ALTER TABLE runs ADD COLUMN app_id BIGINT;
UPDATE runs r SET app_id = t.app_id FROM tasks t WHERE t.id = r.task_id;

-- The claimable runs per group and app in due order. Same predicate as 0014: a claim (pending ->
-- claimed) and a release change no indexed column, so they stay heap-only updates.
DROP INDEX IF EXISTS runs_claimable;
CREATE INDEX runs_claimable ON runs (node_group, app_id, due_at)
    WHERE started_at IS NULL AND finished_at IS NULL;

-- The runs an app's executors hold (started, not finished): counted against the app's
-- capacity. A start writes a new index entry anyway (`started_at` leaves the claimable
-- index's predicate), so this adds one entry to that write and nothing to a claim.
CREATE INDEX runs_running_app ON runs (app_id)
    WHERE started_at IS NOT NULL AND finished_at IS NULL;

-- A tenant's share of each claim relative to the other tenants with due runs in its group.
ALTER TABLE tenants ADD COLUMN weight INTEGER NOT NULL DEFAULT 1 CHECK (weight >= 1);

-- One open episode per app of due runs waiting for capacity: the watchdog raises one
-- `backlog` alarm when the episode opens and resolves it when the backlog clears.
CREATE TABLE app_backlogs (
    app_id     BIGINT PRIMARY KEY REFERENCES apps (id) ON DELETE CASCADE,
    alarm_key  TEXT NOT NULL,
    opened_at  BIGINT NOT NULL
);

ALTER TABLE alarms DROP CONSTRAINT alarms_kind_check;
ALTER TABLE alarms ADD CONSTRAINT alarms_kind_check CHECK (kind IN ('run_failed', 'retries_exhausted', 'timed_out', 'not_started', 'executor_lost', 'node_lost', 'misfire', 'app', 'backlog'));
