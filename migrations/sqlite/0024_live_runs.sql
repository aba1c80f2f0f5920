-- On PostgreSQL, version 24 splits `runs` into live runs and history (see
-- migrations/postgres/0024_live_runs.sql). A SQLite database is one writer's file whose runs
-- are vacuumed with it; its `runs` stays one table. This version only keeps the two backends'
-- migrations numbered alike.
SELECT 1;
