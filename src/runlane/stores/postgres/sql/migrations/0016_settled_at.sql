-- runlane schema for PostgreSQL, version 16: a checkpoint's touch of its run is a HOT update.
--
-- A checkpoint sets the run's updated_at, and runlane_runs_terminal indexed updated_at: an
-- update that changes an indexed column cannot be heap-only, so every checkpoint wrote a new
-- entry into each of the run's indexes (about 11 WAL records and 1.2 kB of WAL per
-- checkpoint, where a heap-only update writes 5 and 0.5 kB). Retention now walks terminal
-- runs by settled_at, which only a terminal settlement sets; no index reads updated_at.
--
-- Runs settled before this version get their settlement instant from updated_at (it was that
-- instant). A run settled by an engine of the previous version still running during the
-- upgrade has no settled_at: retention prunes those by updated_at, as it did (see prune_runs).
ALTER TABLE runlane_runs ADD COLUMN settled_at timestamptz;
UPDATE runlane_runs SET settled_at = updated_at
WHERE status IN ('cancelled', 'completed', 'dead', 'failed');
CREATE INDEX runlane_runs_settled ON runlane_runs (status, settled_at)
    WHERE status IN ('cancelled', 'completed', 'dead', 'failed');
DROP INDEX runlane_runs_terminal;
