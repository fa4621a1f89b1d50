-- runlane schema for SQLite: the lanes overview reads the active singleton runs only.
--
-- runs_singleton held every run that ever had a singleton key, finished ones included, so the
-- lanes of a store of a million runs were read by scanning the newest-runs index whole
-- (1.5 s). runs_singleton_active holds a key's active runs alone, in the order of its lane, as
-- PostgreSQL's runlane_runs_singleton_active does; every statement that searched
-- runs_singleton filters on the active statuses already (next_waiters says so word for word,
-- as SQLite requires to use a partial index).
CREATE INDEX runs_singleton_active ON runs (singleton_key, created_at, id)
    WHERE singleton_key IS NOT NULL
      AND status IN ('blocked', 'cancelling', 'paused', 'pending', 'running', 'suspended');
DROP INDEX runs_singleton;
