-- Console sign-in: the tenant_operator role, server-side sessions and login attempts.

-- tenant_operator: reads a tenant and operates it (trigger, cancel, pause, acknowledge).
ALTER TABLE users DROP CONSTRAINT users_role_check;
ALTER TABLE users ADD CONSTRAINT users_role_check
    CHECK (role IN ('operator', 'tenant_admin', 'tenant_operator', 'tenant_viewer'));

-- A signed-in browser. The cookie holds a random value; only its SHA-256 is stored here.
CREATE TABLE sessions (
    id            TEXT PRIMARY KEY,
    user_id       BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    last_seen_at  BIGINT NOT NULL,
    revoked_at    BIGINT
);
CREATE INDEX sessions_user ON sessions (user_id);

-- Sign-in attempts, for rate limiting per user name and per client address across every
-- console node (the nodes keep no state of their own).
CREATE TABLE login_attempts (
    id         BIGSERIAL PRIMARY KEY,
    username   TEXT NOT NULL,
    address    TEXT NOT NULL,
    at         BIGINT NOT NULL,
    succeeded  BOOLEAN NOT NULL
);
CREATE INDEX login_attempts_username_at ON login_attempts (username, at);
CREATE INDEX login_attempts_address_at ON login_attempts (address, at);
