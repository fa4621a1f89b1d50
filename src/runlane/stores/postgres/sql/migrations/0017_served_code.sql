-- runlane schema for PostgreSQL, version 17: routing by code (SQLite's migration 0014 does the
-- same), and the engines that announce themselves.
--
-- An engine claims only the runs whose (workflow, version) it can replay. Each claim queue is
-- now an index whose leading columns are the code: a poll walks each served code's own entries
-- in claim order (a LATERAL scan per code) and stops at its limit, so runs no engine of the poll
-- serves (a version mid-deploy) cost it nothing, however many they are. They replace the claim
-- queues' indexes. The code never changes, so a checkpoint's touch of a run stays heap-only.
CREATE INDEX runlane_runs_pending_code ON runlane_runs (workflow, version, priority DESC, created_at, id)
    WHERE status = 'pending';
CREATE INDEX runlane_runs_due_code ON runlane_runs (workflow, version, wake_at, id)
    WHERE status IN ('suspended', 'blocked');
CREATE INDEX runlane_runs_leases_code ON runlane_runs (workflow, version, lease_expires_at, id)
    WHERE status IN ('running', 'cancelling');
CREATE INDEX runlane_runs_deadlines_code ON runlane_runs (workflow, version, deadline_at, id)
    WHERE deadline_at IS NOT NULL
      AND status IN ('pending', 'running', 'suspended', 'blocked', 'paused', 'cancelling');
DROP INDEX runlane_runs_pickup;
DROP INDEX runlane_runs_due;
DROP INDEX runlane_runs_leases;
DROP INDEX runlane_runs_deadlines;

-- Engines announce themselves: what each serves, and its heartbeat.
CREATE TABLE runlane_engines (
    id text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    namespace text,
    started_at timestamptz NOT NULL,
    last_beat_at timestamptz NOT NULL,
    lease float8 NOT NULL,
    serves json NOT NULL,
    groups json NOT NULL
);
