-- runlane schema for PostgreSQL, version 19: run attributes (SQLite's migration 0016 does the
-- same).
--
-- A run's attributes are a jsonb object, NULL while it has none. jsonb rather than the json of
-- the other values: an attribute is a scalar compared by value (1 matches 1.0, never "1" nor
-- true), whose text and key order need not survive as written, and only jsonb has an index for
-- containment. The GIN index (jsonb_path_ops: the smallest one that answers @>) serves a listing
-- filtered on any number of attributes at once, `attributes @> '{"customer": "acme"}'`. It is
-- partial: a run without attributes has no entry, so such a start writes it nothing (a strict
-- operator such as @> implies the predicate, so every filter may use the index). Without
-- fastupdate: a start with attributes writes its entries into the index at once, rather than
-- into a pending list that every search reads through until a vacuum merges it (about 3 ms a
-- search with a full list, on 100,000 runs) and that one unlucky start flushes when it is full.
-- A checkpoint never changes the column, so its touch of the run stays a heap-only update.
ALTER TABLE runlane_runs ADD COLUMN attributes jsonb;

CREATE INDEX runlane_runs_attributes ON runlane_runs USING gin (attributes jsonb_path_ops)
    WITH (fastupdate = off) WHERE attributes IS NOT NULL;
