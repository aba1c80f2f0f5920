-- The claim index in the claim's own order.
--
-- A claim reads each app's due runs `ORDER BY due_at, priority DESC, id` up to its window. With
-- the index on (node_group, app_id, due_at) only, the order is the index's up to `due_at`: with
-- statistics the planner sorts incrementally (one `due_at` group at a time), but without them (a
-- fresh table, autovacuum behind) it read and sorted every waiting run of the app to take the
-- first few — 100,000 runs of one tenant's backlog made each claim take longer than the
-- statement timeout, for every tenant. With the whole order in the index a claim reads only the
-- runs it takes, whatever the backlog and whatever the statistics. `priority` and `id` never
-- change on a run, so claims and releases stay heap-only updates.
DROP INDEX IF EXISTS runs_claimable;
CREATE INDEX runs_claimable ON runs (node_group, app_id, due_at, priority DESC, id)
    WHERE started_at IS NULL AND finished_at IS NULL;
