-- On PostgreSQL, version 27 checks a task's new name after the update that renames it rather
-- than before every update of a task (see
-- migrations/postgres/0027_task_names_checked_after_update.sql). SQLite's triggers lock no rows;
-- this version only keeps the two backends' migrations numbered alike.
SELECT 1;
