-- Vacuum that keeps up with `runs` (PostgreSQL's migration 0024 sets the table's autovacuum
-- settings). SQLite has no autovacuum of dead row versions to tune: a deleted row's space is
-- reused by the next insert into its page. The migration keeps the two backends' versions in
-- step and changes nothing here.
SELECT 1;
