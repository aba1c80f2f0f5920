-- Claims and releases without index work.
--
-- PostgreSQL updates a row in place, with no new index entry (a heap-only update), only when no
-- column an index uses changes, and a column named in a partial index's WHERE clause counts.
-- `state` was named by the two partial indexes below, so every state change rewrote every index
-- of `runs`, a claim (pending -> claimed) and a release (claimed -> pending) included. The two
-- indexes now say the same thing through the run's times, which a claim or a release never
-- changes: not started and not finished (pending or claimed), started and not finished
-- (running). A run gets `started_at` when it starts (or with its result) and `finished_at` when
-- it ends, and never loses either.
DROP INDEX IF EXISTS runs_claimable;
CREATE INDEX runs_claimable ON runs (node_group, due_at)
    WHERE started_at IS NULL AND finished_at IS NULL;

DROP INDEX IF EXISTS runs_running_deadline;
CREATE INDEX runs_running_deadline ON runs (deadline_at)
    WHERE started_at IS NOT NULL AND finished_at IS NULL;

-- Room on each page for the versions those heap-only updates write (a claim, the dispatch
-- intent, the start of a run whose result came first): a page with no room turns the update
-- into an ordinary one that writes every index again.
ALTER TABLE runs SET (fillfactor = 50);
