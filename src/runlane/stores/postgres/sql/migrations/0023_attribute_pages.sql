-- runlane schema for PostgreSQL, version 23: a page of runs by attribute is an index range
-- (SQLite's migration 0020 does the same).
--
-- The GIN index of migration 0019 finds a value's runs but carries no creation order: a page
-- of the newest 50 read every match first (10,100 of a million runs for a value that 1% of
-- them hold: 30-40 ms, 85 ms p99 on a loaded machine, and as much again at any depth). Each
-- attribute of a run is now an entry of runlane_run_attributes, whose primary key orders a
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
-- start, ``set_attributes``, a prune), never by a trigger: a foreign key's check is one, run
-- for every entry of every start. The GIN index goes: nothing reads it any more, and as an
-- index of the attributes column it made every ``set_attributes`` a non-HOT update, a new
-- entry in each of the run's indexes.
--
-- The entries of the runs already stored are written here, then the key is built over them in
-- one sort (about 1.5 s and 0.6 s for a million runs of one attribute each).
CREATE TABLE runlane_run_attributes (
    entry bigint NOT NULL,
    created_at timestamptz NOT NULL,
    run_id text COLLATE "C" NOT NULL
);

INSERT INTO runlane_run_attributes (entry, created_at, run_id)
SELECT jsonb_hash_extended(jsonb_build_object(a.key, a.value), 0), r.created_at, r.id
FROM runlane_runs AS r, jsonb_each(r.attributes) AS a
WHERE r.attributes IS NOT NULL;

ALTER TABLE runlane_run_attributes ADD PRIMARY KEY (entry, created_at, run_id);

DROP INDEX runlane_runs_attributes;
