-- runlane schema for PostgreSQL, version 23: a page of runs by attribute is an index range
-- (SQLite's migration 0020 does the same).
--
-- The GIN index of migration 0019 finds a value's runs but carries no creation order: a page
-- of the newest 50 read every match first (10,100 of a million runs for a value that 1% of
-- them hold: 30-40 ms, 85 ms p99 on a loaded machine, and as much again at any depth). Each
-- attribute of a run is now an entry of runlane_attribute_runs, whose primary key orders a
-- value's runs newest first: a page walks its value's range from the cursor and stops at the
-- 50th run, whatever the depth and however many runs hold the value.
--
-- An entry is the hash of one attribute as a jsonb object (``{"customer": "acme"}``), not the
-- name and value themselves: a btree entry has a size limit (about 2.7 kB) that an attribute
-- does not, and jsonb's own hash (the one its hash indexes and hash partitions use) agrees
-- with its equality, the filter's (1 and 1.0 hash alike; "1", 1 and true do not). A listing
-- reads the run's row anyway and tests the whole filter on its attributes (``@>``): a hash
-- that two attributes share can cost a row read, never a wrong answer. The entry's run and
-- creation time complete the key, so a page is one range of it, read index only.
--
-- Like an index, the table is written by the statements that write the runs' attributes (a
-- start, ``set_attributes``, a prune), and no foreign key checks it (its check is a trigger,
-- run for every entry of every start; the triggers below stay still for this version's
-- sessions). The GIN index goes: nothing reads it any more, and as an index of the attributes
-- column it made every ``set_attributes`` a non-HOT update, a new entry in each of the run's
-- indexes.
--
-- Writes to the runs wait while this migrates (SHARE: reads go on), so that the entries it
-- writes are those of every run, about 2 s for a million runs of one attribute each: the
-- entries are written, then the key is built over them in one sort.
LOCK TABLE runlane_runs IN SHARE MODE;

CREATE TABLE runlane_attribute_runs (
    entry bigint NOT NULL,
    created_at timestamptz NOT NULL,
    run_id text COLLATE "C" NOT NULL
);

INSERT INTO runlane_attribute_runs (entry, created_at, run_id)
SELECT jsonb_hash_extended(jsonb_build_object(a.key, a.value), 0), r.created_at, r.id
FROM runlane_runs AS r, jsonb_each(r.attributes) AS a
WHERE r.attributes IS NOT NULL;

ALTER TABLE runlane_attribute_runs ADD PRIMARY KEY (entry, created_at, run_id);

DROP INDEX runlane_runs_attributes;

-- Engines of the previous version still running during an upgrade write attributes (a start,
-- a merge, a prune) without their entries. These triggers write them for such a session only:
-- the sessions of this version say that they write the entries themselves
-- (``runlane.attribute_entries`` on, see ``utc_conninfo``), which the triggers' conditions read
-- without calling their function, and a run without attributes is never their concern. A
-- session without the setting, of this version too, is only slower: the function then
-- rewrites what its statement wrote.
CREATE FUNCTION runlane_attribute_entries() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        DELETE FROM runlane_attribute_runs AS a
        USING jsonb_each(OLD.attributes) AS e
        WHERE a.entry = jsonb_hash_extended(jsonb_build_object(e.key, e.value), 0)
          AND a.created_at = OLD.created_at AND a.run_id = OLD.id;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO runlane_attribute_runs (entry, created_at, run_id)
        SELECT jsonb_hash_extended(jsonb_build_object(e.key, e.value), 0), NEW.created_at, NEW.id
        FROM jsonb_each(NEW.attributes) AS e
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER runlane_runs_attribute_entries_insert AFTER INSERT ON runlane_runs
    FOR EACH ROW WHEN (NEW.attributes IS NOT NULL
                       AND current_setting('runlane.attribute_entries', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION runlane_attribute_entries();

CREATE TRIGGER runlane_runs_attribute_entries_update AFTER UPDATE OF attributes ON runlane_runs
    FOR EACH ROW WHEN (current_setting('runlane.attribute_entries', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION runlane_attribute_entries();

CREATE TRIGGER runlane_runs_attribute_entries_delete AFTER DELETE ON runlane_runs
    FOR EACH ROW WHEN (OLD.attributes IS NOT NULL
                       AND current_setting('runlane.attribute_entries', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION runlane_attribute_entries();
