-- A vacuum of the live runs no longer gives their empty pages back to the file system.
--
-- Vacuum truncates the empty pages at the end of a table, and to truncate it takes the table's
-- ACCESS EXCLUSIVE lock: every claim, start and result waits while it holds it. `live_runs` is
-- vacuumed every few seconds (by each node, and by autovacuum) and its rows turn over as fast,
-- so its last pages were often empty and nearly every vacuum took the lock (measured: a vacuum
-- of 1.4 s of which 0.03 s CPU, the rest trying for the lock and truncating 975 pages that the
-- next seconds' runs needed again). The pages stay and are reused instead; the table's size is
-- bounded by the live runs at their most, as before.
ALTER TABLE live_runs SET (vacuum_truncate = false);
