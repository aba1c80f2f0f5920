-- Hostile input: a tenant's allow-list of executor hosts, and task names restricted to a
-- documented character set.

-- The hosts a tenant's executors may register with (docs/protocol.md §4.1): a JSON array of
-- host names, IP literals and `*.domain` wildcards, normalised by the engine. Empty: any host.
ALTER TABLE tenants ADD COLUMN executor_hosts TEXT NOT NULL DEFAULT '[]';

-- Task names: 1 to 100 of A-Z a-z 0-9 . _ -, starting with a letter or digit (docs/api.md,
-- "Names"). Triggers check new names only — inserted rows and updates that change the name;
-- rows named before keep their names (and keep running) until renamed.
CREATE TRIGGER tasks_name_chars_insert BEFORE INSERT ON tasks
WHEN NEW.name = '' OR length(NEW.name) > 100 OR NEW.name GLOB '*[^A-Za-z0-9._-]*'
    OR NEW.name GLOB '[._-]*'
BEGIN
    SELECT RAISE(ABORT, 'task name must be 1 to 100 of A-Z a-z 0-9 . _ -, starting with a letter or digit');
END;
CREATE TRIGGER tasks_name_chars_update BEFORE UPDATE OF name ON tasks
WHEN NEW.name IS NOT OLD.name AND (NEW.name = '' OR length(NEW.name) > 100
    OR NEW.name GLOB '*[^A-Za-z0-9._-]*' OR NEW.name GLOB '[._-]*')
BEGIN
    SELECT RAISE(ABORT, 'task name must be 1 to 100 of A-Z a-z 0-9 . _ -, starting with a letter or digit');
END;
