-- In step with PostgreSQL's 0013: two indexes of `runs` go. Runs of an executor are looked up
-- among the running runs (`runs_running_deadline` holds exactly those); `runs_task_scheduled`
-- repeated the leading columns of the occurrence key `UNIQUE (task_id, scheduled_at, attempt,
-- shard_index)`, which serves the same lookups.
DROP INDEX IF EXISTS runs_running_executor;
DROP INDEX IF EXISTS runs_task_scheduled;
