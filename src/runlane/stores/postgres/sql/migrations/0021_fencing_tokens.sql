-- runlane schema for PostgreSQL: fencing tokens (the SQLite migration of the same name does the
-- same).
--
-- Every claim that leases a run takes its next fence (``fence + 1``, in the claim's own
-- statement); a step record keeps the fence of the execution that made it, so a worker's result
-- carrying an older fence than its record's is dropped. Neither column is indexed: a checkpoint
-- stays a heap-only update of the run's row.
ALTER TABLE runlane_runs ADD COLUMN fence bigint NOT NULL DEFAULT 0;
ALTER TABLE runlane_steps ADD COLUMN fence bigint;
