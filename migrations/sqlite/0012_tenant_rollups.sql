-- Per tenant and scheduled minute: the rollups of all its tasks merged, so tenant-wide
-- statistics over a week read one row per minute (10,080) however many tasks the tenant has.
-- Written with the per-task rows, in the same transaction, for the same whole minutes.
CREATE TABLE IF NOT EXISTS tenant_rollups (
    tenant_id      BIGINT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    minute         BIGINT NOT NULL,
    succeeded      BIGINT NOT NULL DEFAULT 0,
    failed         BIGINT NOT NULL DEFAULT 0,
    timed_out      BIGINT NOT NULL DEFAULT 0,
    lost           BIGINT NOT NULL DEFAULT 0,
    skipped        BIGINT NOT NULL DEFAULT 0,
    cancelled      BIGINT NOT NULL DEFAULT 0,
    duration_hist  TEXT NOT NULL,
    lateness_hist  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, minute)
);

-- The minutes rolled up before this migration: their per-task rows merged (counts added,
-- histograms added bucket by bucket, buckets in order).
INSERT OR IGNORE INTO tenant_rollups (tenant_id, minute, succeeded, failed, timed_out, lost, skipped,
                            cancelled, duration_hist, lateness_hist)
SELECT r.tenant_id, r.minute, SUM(r.succeeded), SUM(r.failed), SUM(r.timed_out), SUM(r.lost),
       SUM(r.skipped), SUM(r.cancelled),
       COALESCE((SELECT json_group_array(json_array(h.b, h.n))
                 FROM (SELECT json_extract(e.value, '$[0]') AS b,
                              SUM(json_extract(e.value, '$[1]')) AS n
                       FROM run_rollups x, json_each(x.duration_hist) e
                       WHERE x.tenant_id = r.tenant_id AND x.minute = r.minute
                       GROUP BY 1 ORDER BY 1) h), '[]'),
       COALESCE((SELECT json_group_array(json_array(h.b, h.n))
                 FROM (SELECT json_extract(e.value, '$[0]') AS b,
                              SUM(json_extract(e.value, '$[1]')) AS n
                       FROM run_rollups x, json_each(x.lateness_hist) e
                       WHERE x.tenant_id = r.tenant_id AND x.minute = r.minute
                       GROUP BY 1 ORDER BY 1) h), '[]')
FROM run_rollups r
GROUP BY r.tenant_id, r.minute;
