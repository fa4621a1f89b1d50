-- runlane schema for SQLite, version 21: a page of runs by attribute is an index range
-- (PostgreSQL's migration 0023 does the same).
--
-- run_attributes' (key, value) index found a value's runs but not in creation order: a page of
-- the newest 50 looked up and sorted every run of the value first (10,100 of a million runs
-- for a value that 1% of them hold: 50-70 ms on a loaded machine, as much at any depth). Each
-- attribute of a run is now a row of attribute_runs with the run's created_at (which never
-- changes), and its index orders a value's runs newest first: a page walks its value's range
-- from the cursor and stops at the 50th run. The statement that writes a run's attributes
-- writes its created_at with them.
--
-- The rows of the runs already stored move over with their run's created_at (about 3 s for a
-- million).
CREATE TABLE attribute_runs (
    run_id TEXT NOT NULL,
    key TEXT NOT NULL,
    value NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;

INSERT INTO attribute_runs (run_id, key, value, created_at)
SELECT a.run_id, a.key, a.value, r.created_at
FROM run_attributes AS a JOIN runs AS r ON r.id = a.run_id;

DROP TABLE run_attributes;

CREATE INDEX attribute_runs_newest ON attribute_runs (key, value, created_at, run_id);

-- Engines of the previous version still running during an upgrade write, read and prune
-- run_attributes (run_id, key, value) as it was: it stays as a view of attribute_runs whose
-- writes go to that table, dated from their run (which such an engine inserts first). This
-- version never touches it, so its writes pay nothing for it.
CREATE VIEW run_attributes AS SELECT run_id, key, value FROM attribute_runs;

CREATE TRIGGER run_attributes_insert INSTEAD OF INSERT ON run_attributes
BEGIN
    INSERT OR REPLACE INTO attribute_runs (run_id, key, value, created_at)
    SELECT NEW.run_id, NEW.key, NEW.value, created_at FROM runs WHERE id = NEW.run_id;
END;

CREATE TRIGGER run_attributes_delete INSTEAD OF DELETE ON run_attributes
BEGIN
    DELETE FROM attribute_runs WHERE run_id = OLD.run_id AND key = OLD.key;
END;
