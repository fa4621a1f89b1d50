-- runlane schema for SQLite, version 20: a page of runs by attribute is an index range
-- (PostgreSQL's migration 0023 does the same).
--
-- run_attributes' (key, value) index found a value's runs but not in creation order: a page of
-- the newest 50 looked up and sorted every run of the value first (10,100 of a million runs
-- for a value that 1% of them hold: 50-70 ms on a loaded machine, as much at any depth). Each
-- row now carries its run's created_at, and the index orders a value's runs newest first: a
-- page walks its value's range from the cursor and stops at the 50th run. The statement that
-- writes a run's attributes writes its created_at with them (which never changes).
--
-- The table is made anew, with the created_at of the runs already stored, and replaces the
-- old one (about 3 s for a million rows).
CREATE TABLE run_attributes_new (
    run_id TEXT NOT NULL,
    key TEXT NOT NULL,
    value NOT NULL,
    created_at TEXT,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;

INSERT INTO run_attributes_new (run_id, key, value, created_at)
SELECT a.run_id, a.key, a.value, r.created_at
FROM run_attributes AS a JOIN runs AS r ON r.id = a.run_id;

DROP TABLE run_attributes;
ALTER TABLE run_attributes_new RENAME TO run_attributes;

CREATE INDEX run_attributes_newest ON run_attributes (key, value, created_at, run_id);

-- Engines of the previous version still running during an upgrade write a run's attributes
-- without its created_at (which is why the column may be NULL): this trigger dates them from
-- the run, which they insert first. This version's statements date every row themselves, so
-- the trigger's condition never holds for them (about 1 us a row to test it).
CREATE TRIGGER run_attributes_dated AFTER INSERT ON run_attributes
WHEN NEW.created_at IS NULL
BEGIN
    UPDATE run_attributes SET created_at = (SELECT created_at FROM runs WHERE id = NEW.run_id)
    WHERE run_id = NEW.run_id AND key = NEW.key;
END;
