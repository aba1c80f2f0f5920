-- An undrain asked for in the console: the instance's next heartbeat brings it back to `up`,
-- in the same transaction that reads whether the instance is shutting down itself (then it
-- stays draining). Cleared by that heartbeat, a new drain, deregistration and registration.
ALTER TABLE executors ADD COLUMN undrain_requested BOOLEAN NOT NULL DEFAULT FALSE;
