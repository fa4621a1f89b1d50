-- runlane schema for SQLite, version 15: run attributes (PostgreSQL's migration 0018 does the
-- same).
--
-- A run's attributes are a JSON object in its row (NULL while it has none), and each of them is
-- a row of run_attributes, indexed by (key, value): a listing filtered by attributes reads the
-- matching runs' ids from that index, never every run. Triggers keep the table in step with
-- the column, whichever statement writes it (a start, a batch of schedule windows, a turn's
-- set_attributes, retention's prune); a run without attributes costs them their WHEN only.
--
-- A value keeps the SQLite type its JSON parses to (TEXT, INTEGER or REAL; numbers compare by
-- value, never equal to text), and a boolean is a one-byte BLOB, equal to no string and no
-- number: true is not 1. A filter's value goes through the same json_each, so both sides of
-- the comparison are converted by one parser.
ALTER TABLE runs ADD COLUMN attributes TEXT;

CREATE TABLE run_attributes (
    run_id TEXT NOT NULL,
    key TEXT NOT NULL,
    value NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;

CREATE INDEX run_attributes_value ON run_attributes (key, value);

CREATE TRIGGER runs_attributes_inserted AFTER INSERT ON runs
WHEN NEW.attributes IS NOT NULL
BEGIN
    INSERT INTO run_attributes (run_id, key, value)
    SELECT NEW.id, key, CASE type WHEN 'true' THEN x'01' WHEN 'false' THEN x'00' ELSE atom END
    FROM json_each(NEW.attributes);
END;

CREATE TRIGGER runs_attributes_updated AFTER UPDATE OF attributes ON runs
WHEN NEW.attributes IS NOT OLD.attributes
BEGIN
    DELETE FROM run_attributes WHERE run_id = OLD.id;
    INSERT INTO run_attributes (run_id, key, value)
    SELECT NEW.id, key, CASE type WHEN 'true' THEN x'01' WHEN 'false' THEN x'00' ELSE atom END
    FROM json_each(NEW.attributes);
END;

CREATE TRIGGER runs_attributes_deleted AFTER DELETE ON runs
WHEN OLD.attributes IS NOT NULL
BEGIN
    DELETE FROM run_attributes WHERE run_id = OLD.id;
END;
