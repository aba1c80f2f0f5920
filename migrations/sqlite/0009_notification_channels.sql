-- Notification channels per tenant (webhook, e-mail) and their delivery log.

-- A channel is sent every alarm of its tenant raised after it was created, from its minimum
-- severity up, except muted ones. `scanned_until`: the engines have made delivery rows for the
-- alarms raised before this instant (they look back a little before it each pass, so an alarm
-- committed late is not missed).
CREATE TABLE notification_channels (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id      BIGINT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name           TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 63 AND name NOT GLOB '*[^a-z0-9_-]*' AND name NOT GLOB '[_-]*'),
    kind           TEXT NOT NULL CHECK (kind IN ('webhook', 'email')),
    min_severity   TEXT NOT NULL CHECK (min_severity IN ('info', 'warning', 'critical')),
    config         TEXT NOT NULL,
    -- webhook: the signing secret; e-mail: the SMTP password (never shown by the API)
    secret         TEXT,
    enabled        BOOLEAN NOT NULL DEFAULT TRUE,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL,
    scanned_until  BIGINT NOT NULL,
    UNIQUE (tenant_id, name)
);

-- One row per (channel, alarm): the delivery and its attempts.
CREATE TABLE notification_deliveries (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    channel_id       BIGINT NOT NULL REFERENCES notification_channels (id) ON DELETE CASCADE,
    tenant_id        BIGINT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    alarm_id         BIGINT NOT NULL REFERENCES alarms (id) ON DELETE CASCADE,
    state            TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  BIGINT NOT NULL,
    last_status      INTEGER,
    last_error       TEXT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    delivered_at     BIGINT,
    UNIQUE (channel_id, alarm_id)
);
CREATE INDEX notification_deliveries_due ON notification_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX notification_deliveries_channel ON notification_deliveries (channel_id, id);
