-- Console actions that take effect: narrowed API tokens, cancels delivered to the wrapper,
-- muted alarms, and purging old idempotency keys.

-- A token may carry a role below its user's (NULL: the user's role). Requests made with it
-- act with the lower of the two.
ALTER TABLE api_tokens ADD COLUMN role TEXT
    CHECK (role IN ('operator', 'tenant_admin', 'tenant_operator', 'tenant_viewer'));

-- A run cancelled through the API while an executor instance may hold it: the engine tells
-- that instance to cancel it when `cancel_pending_at` has come, then clears it.
ALTER TABLE runs ADD COLUMN cancel_pending_at BIGINT;
CREATE INDEX runs_cancel_pending ON runs (cancel_pending_at) WHERE cancel_pending_at IS NOT NULL;

-- An alarm raised while its task's alarms were muted: recorded, never published.
ALTER TABLE alarms ADD COLUMN muted BOOLEAN NOT NULL DEFAULT FALSE;
DROP INDEX alarms_unpublished;
CREATE INDEX alarms_unpublished ON alarms (id) WHERE published_at IS NULL AND muted = FALSE;

-- Idempotency keys are purged by age.
CREATE INDEX trigger_keys_created ON trigger_keys (created_at);
