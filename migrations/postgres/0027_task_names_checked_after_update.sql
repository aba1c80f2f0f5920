-- The task-name rule of migration 0006 is checked after an update that renames a task, not
-- before every update of a task.
--
-- Before it runs a row-level BEFORE UPDATE trigger, PostgreSQL locks the row to hand the trigger
-- its current version, whatever the trigger's column list (`OF name`) and `WHEN` clause then
-- decide. Every claim updates the tasks of its runs (their fire counts), so every run wrote a
-- row lock on its task — a WAL record and a change to the task's page — ahead of the update
-- itself. An AFTER trigger's column list and `WHEN` are tested as the update is made, without a
-- lock; raising from it refuses the renaming statement the same way, with the same error.
DROP TRIGGER tasks_name_chars_update ON tasks;
CREATE TRIGGER tasks_name_chars_update AFTER UPDATE OF name ON tasks
    FOR EACH ROW WHEN (NEW.name IS DISTINCT FROM OLD.name) EXECUTE FUNCTION tasks_name_chars();
