-- On PostgreSQL, version 28 rebuilds `runs` with its columns in the order its writes change
-- them (see migrations/postgres/0028_run_columns_in_write_order.sql). SQLite's `runs` keeps its
-- order: other tables' foreign keys reference it, and a row there is not written to a log the
-- way PostgreSQL logs it. This version only keeps the two backends' migrations numbered alike.
SELECT 1;
