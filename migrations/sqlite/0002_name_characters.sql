-- Names are restricted to a documented character set (docs/protocol.md, "Names"); SQLite cannot
-- add a CHECK to an existing table, so triggers refuse rows that break it.
-- Tenant and app names (and node groups): 1 to 63 of a-z 0-9 - _, starting with a letter or
-- digit; never a dot, since the app key is `<tenant>.<app>`.
CREATE TRIGGER tenants_name_chars_insert BEFORE INSERT ON tenants
WHEN NEW.name = '' OR length(NEW.name) > 63 OR NEW.name GLOB '*[^a-z0-9_-]*'
    OR NEW.name GLOB '[-_]*'
    OR NEW.node_group = '' OR length(NEW.node_group) > 63
    OR NEW.node_group GLOB '*[^a-z0-9_-]*' OR NEW.node_group GLOB '[-_]*'
BEGIN
    SELECT RAISE(ABORT, 'tenant name and node group must be 1 to 63 of a-z 0-9 - _, starting with a letter or digit');
END;
CREATE TRIGGER tenants_name_chars_update BEFORE UPDATE OF name, node_group ON tenants
WHEN NEW.name = '' OR length(NEW.name) > 63 OR NEW.name GLOB '*[^a-z0-9_-]*'
    OR NEW.name GLOB '[-_]*'
    OR NEW.node_group = '' OR length(NEW.node_group) > 63
    OR NEW.node_group GLOB '*[^a-z0-9_-]*' OR NEW.node_group GLOB '[-_]*'
BEGIN
    SELECT RAISE(ABORT, 'tenant name and node group must be 1 to 63 of a-z 0-9 - _, starting with a letter or digit');
END;
CREATE TRIGGER apps_name_chars_insert BEFORE INSERT ON apps
WHEN NEW.name = '' OR length(NEW.name) > 63 OR NEW.name GLOB '*[^a-z0-9_-]*'
    OR NEW.name GLOB '[-_]*'
BEGIN
    SELECT RAISE(ABORT, 'app name must be 1 to 63 of a-z 0-9 - _, starting with a letter or digit');
END;
CREATE TRIGGER apps_name_chars_update BEFORE UPDATE OF name ON apps
WHEN NEW.name = '' OR length(NEW.name) > 63 OR NEW.name GLOB '*[^a-z0-9_-]*'
    OR NEW.name GLOB '[-_]*'
BEGIN
    SELECT RAISE(ABORT, 'app name must be 1 to 63 of a-z 0-9 - _, starting with a letter or digit');
END;
-- User names: 1 to 100 of A-Z a-z 0-9 . _ @ + -.
CREATE TRIGGER users_username_chars_insert BEFORE INSERT ON users
WHEN NEW.username = '' OR length(NEW.username) > 100
    OR NEW.username GLOB '*[^A-Za-z0-9._@+-]*'
BEGIN
    SELECT RAISE(ABORT, 'user name must be 1 to 100 of A-Z a-z 0-9 . _ @ + -');
END;
CREATE TRIGGER users_username_chars_update BEFORE UPDATE OF username ON users
WHEN NEW.username = '' OR length(NEW.username) > 100
    OR NEW.username GLOB '*[^A-Za-z0-9._@+-]*'
BEGIN
    SELECT RAISE(ABORT, 'user name must be 1 to 100 of A-Z a-z 0-9 . _ @ + -');
END;
