-- runlane schema for PostgreSQL: status counts read an index (the SQLite migration of the same
-- name does the same).
--
-- ``count_runs`` (the console's and the API's counts by status, of every run or of one
-- workflow) grouped the whole table: a parallel scan of a million runs took 150-250 ms. On
-- (status, workflow) the counts are an index-only scan of the narrow index, and a workflow's
-- counts a walk of each status's range; ``active_run_counts`` reads the active statuses'
-- ranges. A run's row gains one index entry, rewritten when its status changes (which was
-- never a heap-only update: runlane_runs_status_newest holds the status already).
CREATE INDEX runlane_runs_status_workflow ON runlane_runs (status, workflow);
