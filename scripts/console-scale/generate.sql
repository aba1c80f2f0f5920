-- The console at scale: 10,000 tasks and 1,000,000 finished runs over the last 7 days in the
-- tenant of the task named 'tpl-cron' (create it first; see docs/console.md "At scale").
-- Every task is paused (nothing fires); run an engine node afterwards to roll the runs up.
UPDATE tasks SET paused = true;
INSERT INTO tasks (tenant_id, app_id, name, description, handler, params, schedule_kind, cron_expr,
  interval_ms, anchor_at, timezone, misfire_policy, misfire_threshold_ms, misfire_max_catch_up,
  overlap_policy, routing, timeout_ms, start_timeout_ms, max_retries, retry_backoff_ms,
  retry_backoff_max_ms, recover_lost, priority, paused, version, created_at, updated_at)
SELECT t.tenant_id, t.app_id, 'task-' || g, 'generated task ' || g, t.handler, t.params,
  t.schedule_kind, t.cron_expr, t.interval_ms, t.anchor_at, t.timezone, t.misfire_policy,
  t.misfire_threshold_ms, t.misfire_max_catch_up, t.overlap_policy, t.routing, t.timeout_ms,
  t.start_timeout_ms, t.max_retries, t.retry_backoff_ms, t.retry_backoff_max_ms, t.recover_lost,
  t.priority, true, 1, t.created_at, t.updated_at
FROM tasks t, generate_series(1, 9999) g WHERE t.name = 'tpl-cron';
-- 100 runs per task, spread over the week: 95 % succeeded, 3 % failed, 1 % timed out, 1 % lost.
INSERT INTO runs (tenant_id, task_id, node_group, scheduled_at, due_at, attempt, trigger_kind,
  state, created_at, claimed_at, dispatched_at, started_at, finished_at, output, error)
SELECT t.tenant_id, t.id, 'default', s.at, s.at, 1, 'schedule',
  CASE WHEN s.r < 0.95 THEN 'succeeded' WHEN s.r < 0.98 THEN 'failed'
       WHEN s.r < 0.99 THEN 'timed_out' ELSE 'lost' END,
  s.at, s.at + 2, s.at + 3, s.at + 5 + (s.r * 20)::BIGINT, s.at + 200 + (s.r * 5000)::BIGINT,
  CASE WHEN s.r < 0.95 THEN '{"ok":true}'::JSONB END,
  CASE WHEN s.r >= 0.95 THEN 'exit status 1' END
FROM (SELECT id, tenant_id FROM tasks WHERE tenant_id = (SELECT tenant_id FROM tasks
      WHERE name = 'tpl-cron')) t,
LATERAL (SELECT (EXTRACT(EPOCH FROM now()) * 1000)::BIGINT - 60000 - (k * 6048000)::BIGINT
                - (t.id % 6000) * 1000 AS at, random() AS r
         FROM generate_series(0, 99) k) s;
ANALYZE tasks;
ANALYZE runs;
