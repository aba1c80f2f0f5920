-- A run must belong to an app of its own tenant. Here `runs.app_id` is `NOT NULL` (migration
-- 0019) and a run's app is read from its task within its tenant, so a run naming a task of
-- another tenant is already refused; SQLite gets a trigger for the same rule under this number.
COMMENT ON COLUMN runs.app_id IS
    'The app of the run''s task within the run''s tenant. NOT NULL: a run naming a task of another tenant is refused.';
