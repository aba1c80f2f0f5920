-- In step with PostgreSQL's 0014: the partial indexes of waiting and running runs are defined by
-- the run's times (`started_at`, `finished_at`) instead of its state, so queries read them the
-- same way on both backends.
DROP INDEX IF EXISTS runs_claimable;
CREATE INDEX runs_claimable ON runs (node_group, due_at)
    WHERE started_at IS NULL AND finished_at IS NULL;

DROP INDEX IF EXISTS runs_running_deadline;
CREATE INDEX runs_running_deadline ON runs (deadline_at)
    WHERE started_at IS NOT NULL AND finished_at IS NULL;
