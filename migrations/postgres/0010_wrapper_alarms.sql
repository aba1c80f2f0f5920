-- Alarms raised by an app's wrapper (a handler's ctx.alarm, or the wrapper's own
-- "engine unreachable"): kind 'app', with the wrapper's own kind in details.app_kind.
ALTER TABLE alarms DROP CONSTRAINT alarms_kind_check;
ALTER TABLE alarms ADD CONSTRAINT alarms_kind_check CHECK (kind IN ('run_failed', 'retries_exhausted', 'timed_out', 'not_started', 'executor_lost', 'node_lost', 'misfire', 'app'));
