-- Less index work per run.
--
-- The dispatch intent (the executor a claimed run is about to be sent to, written before the
-- send) changes only `executor_id`. That column was the key of `runs_running_executor`, so every
-- intent rewrote each of the table's indexes. Runs of an executor are looked up only when it is
-- judged lost or reconciled, among the running runs (`runs_running_deadline` holds exactly those),
-- so the index goes and the intent no longer touches an indexed column.
DROP INDEX IF EXISTS runs_running_executor;

-- `runs_task_scheduled (task_id, scheduled_at)` repeated the leading columns of the occurrence key
-- `UNIQUE (task_id, scheduled_at, attempt, shard_index)`, which serves the same lookups; every
-- insert and every state change wrote both.
DROP INDEX IF EXISTS runs_task_scheduled;

-- Room on each page for the new version of a row updated without an indexed column changing
-- (a heap-only update writes no index entry); new pages only, old ones fill as they are vacuumed.
ALTER TABLE runs SET (fillfactor = 80);
