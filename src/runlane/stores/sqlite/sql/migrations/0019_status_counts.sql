-- runlane schema for SQLite: status counts read an index (the PostgreSQL migration of the same
-- name does the same).
--
-- ``count_runs`` of one workflow walked every run of runs_status_newest (590 ms for a million
-- runs), and ``active_run_counts`` (the console's) scanned runs_workflow_newest whole (1.5 s).
-- On (status, workflow) both are searches of the index, which covers them.
CREATE INDEX runs_status_workflow ON runs (status, workflow);
