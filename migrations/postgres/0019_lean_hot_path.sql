-- A leaner hot path: runs without foreign keys to tenants, tasks and executors; room for heap-only
-- updates of the tasks' fire counts.
--
-- Runs without foreign keys to tenants, tasks and executors.
--
-- Every run inserted checked its task and tenant (a trigger and a query per row, and a share lock
-- on each referenced row), and every dispatch intent checked its executor: a lock on one of the
-- few executor rows that every concurrent transaction shares (a multixact when two overlap). The
-- references are kept by the store instead:
-- * a run is inserted with its task's tenant and app read from the task row, which the claim,
--   the result batch and a manual trigger hold locked while they insert;
-- * deleting an app or a tenant deletes their runs first, with their tasks locked (tasks are
--   otherwise only ever marked deleted);
-- * executors are deleted only with their app, whose runs go first.
-- The runs' references to other runs (parent, chain root) keep theirs: only chain runs pay them.
ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_tenant_id_fkey;
ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_task_id_fkey;
ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_executor_id_fkey;

-- A run's app is read from its task on insert: none (the task is missing, or is another
-- tenant's) refuses the insert, as the foreign key did.
UPDATE runs r SET app_id = t.app_id FROM tasks t WHERE t.id = r.task_id AND r.app_id IS NULL;
ALTER TABLE runs ALTER COLUMN app_id SET NOT NULL;

-- Room on each page of `tasks` for the new version of a row whose fire count a claim adds to
-- (a heap-only update: no index entry, only the changed bytes in the log). A full page turned
-- every count into an ordinary update that moved the row and wrote each index again. New pages
-- only; older ones get the room as they are rewritten.
ALTER TABLE tasks SET (fillfactor = 50);

-- The watchdog looks for runs past their start timeout only while some task has one: this finds
-- out in one index probe.
CREATE INDEX tasks_with_start_timeout ON tasks (id) WHERE start_timeout_ms IS NOT NULL;
