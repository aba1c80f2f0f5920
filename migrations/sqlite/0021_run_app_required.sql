-- A run must belong to an app. On PostgreSQL `runs.app_id` is `NOT NULL` (migration 0019), and
-- a run's app is read from its task within its tenant, so a run naming a task of another tenant
-- is refused there. SQLite cannot add `NOT NULL` to a column already added (0015) without
-- rebuilding the table: this trigger refuses the same insert with a message the store maps to
-- "not found" (`store/tx.rs`, `reference_or`).
CREATE TRIGGER runs_app_required BEFORE INSERT ON runs
WHEN NEW.app_id IS NULL
BEGIN
    SELECT RAISE(ABORT, 'run_app_required: runs.app_id may not be NULL');
END;
