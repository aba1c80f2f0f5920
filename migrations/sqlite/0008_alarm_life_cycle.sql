-- Alarm life cycle and its events: raised -> acknowledged -> resolved, repeats counted, and an
-- outbox of alarm events that the engine's relay publishes to the message bus.

-- How often an open alarm happened (1 + its repeats), the last time, and when the task's next
-- success resolved it.
ALTER TABLE alarms ADD COLUMN count BIGINT NOT NULL DEFAULT 1;
ALTER TABLE alarms ADD COLUMN last_seen BIGINT;
UPDATE alarms SET last_seen = created_at;
ALTER TABLE alarms ADD COLUMN resolved_at BIGINT;
-- A repeat of an open alarm (same task and kind): kept for its dedupe key and history, counted
-- on the open alarm, never listed or published on its own.
ALTER TABLE alarms ADD COLUMN repeat_of BIGINT REFERENCES alarms (id) ON DELETE CASCADE;
-- A task's open alarms, for repeats and for resolving them on the task's next success.
CREATE INDEX alarms_open_by_task ON alarms (task_id, kind)
    WHERE resolved_at IS NULL AND repeat_of IS NULL;

-- The outbox: every transition of an alarm, with a snapshot of the alarm as it was then.
CREATE TABLE alarm_events (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    alarm_id      BIGINT NOT NULL REFERENCES alarms (id) ON DELETE CASCADE,
    tenant_id     BIGINT REFERENCES tenants (id) ON DELETE CASCADE,
    event         TEXT NOT NULL CHECK (event IN ('raised', 'repeated', 'acknowledged', 'resolved')),
    alarm         TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    published_at  BIGINT
);
CREATE INDEX alarm_events_unpublished ON alarm_events (id) WHERE published_at IS NULL;
CREATE INDEX alarm_events_alarm ON alarm_events (alarm_id);
