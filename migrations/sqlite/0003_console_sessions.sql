-- no-transaction
-- Console sign-in: the tenant_operator role, server-side sessions and login attempts.
--
-- SQLite cannot change a CHECK constraint, so `users` is rebuilt the documented way: foreign
-- keys off (otherwise dropping the old table would cascade into api_tokens), which is only
-- possible outside a transaction, hence `no-transaction` and the explicit BEGIN/COMMIT.

PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;

CREATE TABLE users_new (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id      BIGINT REFERENCES tenants (id) ON DELETE CASCADE,
    username       TEXT NOT NULL UNIQUE,
    password_hash  TEXT NOT NULL,
    role           TEXT NOT NULL CHECK (role IN ('operator', 'tenant_admin', 'tenant_operator', 'tenant_viewer')),
    disabled       BOOLEAN NOT NULL DEFAULT FALSE,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL,
    CHECK ((role = 'operator') = (tenant_id IS NULL))
);
INSERT INTO users_new (id, tenant_id, username, password_hash, role, disabled, created_at, updated_at)
    SELECT id, tenant_id, username, password_hash, role, disabled, created_at, updated_at FROM users;
DROP TABLE users;
ALTER TABLE users_new RENAME TO users;
CREATE INDEX users_tenant ON users (tenant_id);
-- Triggers live with their table: the user-name checks of 0002 are made again on the new one.
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

CREATE TABLE sessions (
    id            TEXT PRIMARY KEY,
    user_id       BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    last_seen_at  BIGINT NOT NULL,
    revoked_at    BIGINT
);
CREATE INDEX sessions_user ON sessions (user_id);

CREATE TABLE login_attempts (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    username   TEXT NOT NULL,
    address    TEXT NOT NULL,
    at         BIGINT NOT NULL,
    succeeded  BOOLEAN NOT NULL
);
CREATE INDEX login_attempts_username_at ON login_attempts (username, at);
CREATE INDEX login_attempts_address_at ON login_attempts (address, at);

COMMIT;
PRAGMA foreign_keys = ON;
