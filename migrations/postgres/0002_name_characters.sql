-- Names are restricted to a documented character set (docs/protocol.md, "Names").
-- Tenant and app names form the app key `<tenant>.<app>` that signs every protocol request, so
-- they can never contain a dot: 1 to 63 of a-z 0-9 - _, starting with a letter or digit. The
-- same holds for node groups. The validation layer has always enforced this for tenants, apps
-- and node groups, so existing rows satisfy it.
ALTER TABLE tenants ADD CONSTRAINT tenants_name_chars
    CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$');
ALTER TABLE tenants ADD CONSTRAINT tenants_node_group_chars
    CHECK (node_group ~ '^[a-z0-9][a-z0-9_-]{0,62}$');
ALTER TABLE apps ADD CONSTRAINT apps_name_chars
    CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$');
-- User names: 1 to 100 of A-Z a-z 0-9 . _ @ + - (an e-mail address fits). Rows written before
-- this rule are not re-checked (NOT VALID); new and changed rows are.
ALTER TABLE users ADD CONSTRAINT users_username_chars
    CHECK (username ~ '^[A-Za-z0-9._@+-]{1,100}$') NOT VALID;
