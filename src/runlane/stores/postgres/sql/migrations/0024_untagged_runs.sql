-- runlane schema for PostgreSQL: a run without tags writes nothing to the tags index.
--
-- runlane_runs_tags held an entry of every run, an empty array included, and wrote its
-- pending list's meta page at the run's insert and again at its settlement (that update is
-- never heap-only: it changes the status, which other indexes hold): 336 of a one-step run's
-- 2,950 WAL bytes (benchmarks/wal.py; 2,615 after), for runs most of which carry no tag. The
-- index now holds the tagged runs only, and without a pending list: an insert writes its
-- entries where they go (a keyed run's lane tag: 246 bytes where the pending list took 351).
-- A tag filter says ``tags <> '{}'`` beside ``tags @> ARRAY[tag]`` so the planner can use it.
DROP INDEX runlane_runs_tags;
CREATE INDEX runlane_runs_tags ON runlane_runs USING gin (tags) WITH (fastupdate = off)
    WHERE tags <> '{}';
