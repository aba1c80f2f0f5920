-- Vacuum that keeps up with `runs`.
--
-- Every run is inserted, updated two or three times and deleted by retention within minutes: at
-- thousands of runs a second the table makes tens of thousands of dead row versions a second.
-- With the server's defaults, autovacuum waits for a fifth of the table to be dead and then
-- sleeps 2 ms after every 200 units of work; on a table of gigabytes with ten indexes one pass
-- took minutes, dead versions piled up behind it, the table and its claim index grew, and claims
-- read more and more dead entries. These settings apply to `runs` only:
-- * a pass starts once 1 % of the rows (at least 10,000) are dead, so each pass has less to do;
-- * a pass does not sleep: it works through the table at the speed of the machine;
-- * a pass does not cut the empty pages off the table's end: that takes an exclusive lock on
--   the table, which holds up every claim and result while it lasts, and the pages are filled
--   again within seconds.
ALTER TABLE runs SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_cost_delay = 0,
    vacuum_truncate = false
);
