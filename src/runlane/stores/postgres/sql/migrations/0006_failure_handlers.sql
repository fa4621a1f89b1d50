-- A run's terminal failures (failed or dead) so far, kept across requeues: the n-th one starts
-- the failure handler run "<run id>.failure.<n>", in the write that settles the run.
ALTER TABLE runlane_runs ADD COLUMN failures integer NOT NULL DEFAULT 0;
