-- runlane schema for PostgreSQL, version 18: run control (SQLite's migration 0015 does the same).
--
-- A pause asked of a leased run takes effect at its turn's next write (``pause_requested_at``);
-- a paused run is ``paused``, an active status: it keeps its slots and counts against its quota,
-- so the indexes and counts of a key's active runs take it in. A fork records the run and the
-- position it was forked from. A detached child is left running when its parent is cancelled.
ALTER TABLE runlane_runs ADD COLUMN pause_requested_at timestamptz;
ALTER TABLE runlane_runs ADD COLUMN forked_from json;  -- [run id, seq]
ALTER TABLE runlane_runs ADD COLUMN detached boolean NOT NULL DEFAULT false;

CREATE INDEX runlane_runs_singleton_active ON runlane_runs (singleton_key, created_at, id)
    WHERE singleton_key IS NOT NULL
      AND status IN ('pending', 'running', 'suspended', 'blocked', 'paused', 'cancelling');
DROP INDEX runlane_runs_singleton;

-- runlane_start_counts (migration 0015) with a paused run among the key's active runs.
CREATE OR REPLACE FUNCTION runlane_start_counts(
    p_lock_keys text[], p_quota_key text, p_quota_statuses text[], p_singleton_key text,
    p_limit integer, p_capacity integer, p_created_at timestamptz, p_id text, p_now timestamptz
) RETURNS TABLE (quota_active bigint, key_active bigint, key_ahead bigint)
LANGUAGE plpgsql VOLATILE ROWS 1 AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(o.h)
    FROM (SELECT DISTINCT hashtextextended(k, 0) AS h FROM unnest(p_lock_keys) AS k ORDER BY h) AS o;
    RETURN QUERY SELECT
        (SELECT count(*) FROM runlane_runs AS r
         WHERE r.concurrency_key = p_quota_key AND r.status = ANY(p_quota_statuses)),
        (SELECT count(*) FROM (
            SELECT 1 FROM runlane_runs AS r
            WHERE r.singleton_key = p_singleton_key
              AND r.status IN ('pending', 'running', 'suspended', 'blocked', 'paused', 'cancelling')
            LIMIT coalesce(p_capacity, 0)) AS a),
        h.holders + (SELECT count(*) FROM (
            SELECT 1 FROM runlane_runs AS r
            WHERE r.singleton_key = p_singleton_key AND NOT r.holds_slot
              AND r.status IN ('pending', 'running', 'suspended', 'blocked')
              AND (r.begin_at IS NULL OR r.begin_at <= p_now)
              AND (r.created_at, r.id) < (p_created_at, p_id)
            ORDER BY r.created_at, r.id
            LIMIT greatest(coalesce(nullif(p_limit, 0), 1) - h.holders, 0)) AS w)
    FROM (SELECT count(*) AS holders FROM runlane_runs AS r
          WHERE r.singleton_key = p_singleton_key AND r.holds_slot) AS h;
END
$$;
