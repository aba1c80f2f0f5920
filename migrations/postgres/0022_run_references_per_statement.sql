-- A run's references go with it in one step per statement, not in four triggers per row.
--
-- Four foreign keys named `runs (id)`: a run's parent and chain root, an alarm's run (all
-- `ON DELETE SET NULL`) and a trigger key's run (`ON DELETE CASCADE`). Each deleted run fired
-- their four row triggers, and each trigger ran its own query. Retention deletes runs as fast
-- as they are made: for a batch of 10,000 old runs beside two million, the four triggers took
-- 230-290 ms of the statement's 476 ms. A batch of 1,000 (what retention deletes per
-- statement) took 32-43 ms with the keys and takes 8-14 ms with the trigger below, on a warm
-- session beside the same two million runs.
--
-- The same work is now done once per statement, from the statement's deleted rows, by the
-- trigger below. Every statement that deletes runs (retention, an app's or a tenant's deletion)
-- gets it, as it got the foreign keys' actions. What the keys also checked on insert, the store
-- keeps: a run's parent and chain root, an alarm's run and a trigger key's run are always
-- written from a run read in the same transaction.
ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_parent_run_id_fkey;
ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_chain_root_id_fkey;
ALTER TABLE alarms DROP CONSTRAINT IF EXISTS alarms_run_id_fkey;
ALTER TABLE trigger_keys DROP CONSTRAINT IF EXISTS trigger_keys_run_id_fkey;

-- The deleted runs' ids once, then one range scan of each partial index that names runs
-- (`runs_parent`, `runs_chain_root`, `alarms_run`, `trigger_keys_run`) between the lowest and the
-- highest deleted id, keeping the rows that name a deleted run (`+ 0` keeps the id list a filter:
-- as an index condition it would be one index descent per id).
CREATE FUNCTION runs_forget_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    gone_ids BIGINT[];
    lo BIGINT;
    hi BIGINT;
BEGIN
    SELECT array_agg(id), min(id), max(id) INTO gone_ids, lo, hi FROM gone;
    IF lo IS NULL THEN
        RETURN NULL;
    END IF;
    DELETE FROM trigger_keys WHERE run_id BETWEEN lo AND hi AND run_id + 0 = ANY (gone_ids);
    UPDATE alarms SET run_id = NULL WHERE run_id BETWEEN lo AND hi AND run_id + 0 = ANY (gone_ids);
    UPDATE runs SET parent_run_id = NULL
        WHERE parent_run_id BETWEEN lo AND hi AND parent_run_id + 0 = ANY (gone_ids);
    UPDATE runs SET chain_root_id = NULL
        WHERE chain_root_id BETWEEN lo AND hi AND chain_root_id + 0 = ANY (gone_ids);
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_forget_deleted AFTER DELETE ON runs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION runs_forget_deleted();
