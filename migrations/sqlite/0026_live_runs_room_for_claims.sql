-- On PostgreSQL, version 26 leaves room on each page of `live_runs` for its runs' claimed
-- versions (see migrations/postgres/0026_live_runs_room_for_claims.sql). SQLite has no live runs
-- apart; this version only keeps the two backends' migrations numbered alike.
SELECT 1;
