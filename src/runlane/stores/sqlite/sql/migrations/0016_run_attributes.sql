-- runlane schema for SQLite, version 16: run attributes (PostgreSQL's migration 0019 does the
-- same).
--
-- A run's attributes are a JSON object in its row (NULL while it has none), and each of them is
-- a row of run_attributes, indexed by (key, value): a listing filtered by attributes reads the
-- matching runs' ids from that index, never every run. The store keeps the table in step where
-- it writes the column (a start, a batch of schedule windows, a turn's set_attributes, a prune)
-- rather than by triggers: a trigger on runs costs every insert about 7 us, attributes or not.
--
-- A value keeps the SQLite type its JSON parses to (TEXT, INTEGER or REAL; numbers compare by
-- value, never equal to text), and a boolean is a one-byte BLOB, equal to no string and no
-- number: true is not 1. A filter's value goes through the same json_each and conversion
-- (queries.sql, ``attribute_value``), so both sides of the comparison come from one parser.
ALTER TABLE runs ADD COLUMN attributes TEXT;

CREATE TABLE run_attributes (
    run_id TEXT NOT NULL,
    key TEXT NOT NULL,
    value NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;

CREATE INDEX run_attributes_value ON run_attributes (key, value);
