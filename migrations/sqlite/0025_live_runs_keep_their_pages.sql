-- On PostgreSQL, version 25 keeps vacuum from truncating `live_runs` (see
-- migrations/postgres/0025_live_runs_keep_their_pages.sql). SQLite has no live runs apart; this
-- version only keeps the two backends' migrations numbered alike.
SELECT 1;
