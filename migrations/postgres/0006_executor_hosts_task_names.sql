-- Hostile input: a tenant's allow-list of executor hosts, and task names restricted to a
-- documented character set.

-- The hosts a tenant's executors may register with (docs/protocol.md §4.1): a JSON array of
-- host names, IP literals and `*.domain` wildcards, normalised by the engine. Empty: any host.
ALTER TABLE tenants ADD COLUMN executor_hosts JSONB NOT NULL DEFAULT '[]';

-- Task names: 1 to 100 of A-Z a-z 0-9 . _ -, starting with a letter or digit (docs/api.md,
-- "Names"). Not a CHECK: PostgreSQL checks a CHECK (even one added NOT VALID) on every later
-- update of a row, and the engine updates tasks while it schedules them (fires_scheduled), so
-- one task named before this rule would fail every claim that reaches it. The trigger checks
-- new names only — inserted rows and updates that change the name; rows named before keep
-- their names (and keep running) until renamed.
CREATE FUNCTION tasks_name_chars() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.name !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$' THEN
        RAISE EXCEPTION 'task name must be 1 to 100 of A-Z a-z 0-9 . _ -, starting with a letter or digit'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER tasks_name_chars_insert BEFORE INSERT ON tasks
    FOR EACH ROW EXECUTE FUNCTION tasks_name_chars();
CREATE TRIGGER tasks_name_chars_update BEFORE UPDATE OF name ON tasks
    FOR EACH ROW WHEN (NEW.name IS DISTINCT FROM OLD.name) EXECUTE FUNCTION tasks_name_chars();
