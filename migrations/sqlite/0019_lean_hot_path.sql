-- The PostgreSQL migration of the same number takes the foreign keys off `runs` and gives
-- `tasks` room for heap-only updates; SQLite keeps its foreign keys (one writer at a time: no
-- lock on a referenced row stands in another transaction's way) and has no fillfactor.
--
-- The watchdog looks for runs past their start timeout only while some task has one: this finds
-- out in one index probe.
CREATE INDEX tasks_with_start_timeout ON tasks (id) WHERE start_timeout_ms IS NOT NULL;
