-- The claim index in the claim's own order (`ORDER BY due_at, priority DESC, id`), as on
-- PostgreSQL (see the migration of the same number there): a claim reads only the runs it
-- takes, however many wait, instead of sorting an app's whole backlog.
DROP INDEX IF EXISTS runs_claimable;
CREATE INDEX runs_claimable ON runs (node_group, app_id, due_at, priority DESC, id)
    WHERE started_at IS NULL AND finished_at IS NULL;
