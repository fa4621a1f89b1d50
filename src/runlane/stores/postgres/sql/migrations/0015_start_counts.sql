-- runlane schema for PostgreSQL, version 15: a gated start counts in FIFO order, and only as
-- far as its decision needs.
--
-- runlane_start_counts is runlane_gate_counts (migration 0003: the locks first, in a statement
-- of their own, then the counts) with two counts changed:
--
-- * key_ahead: the key's slot holders, and the waiters ahead of the new run in FIFO order
--   (``(created_at, id)`` before ``(p_created_at, p_id)``; neither cancelling nor held by a
--   throttle or debounce), counted up to ``p_limit``: what the claim's admission counts
--   (``claim_admit``). A claim now would admit the run exactly when it is under the limit, so
--   the start claims it at once, or creates it parked as the claim would park it.
-- * key_active: the key's active runs, counted up to ``p_capacity`` (``limit +
--   max_queue_depth``; none without a depth): the start is refused when it reaches it.
--
-- Both walks stop early, so a start behind 10,000 waiters costs what one behind ten does. The
-- functions of migrations 0003 and 0009 stay for engines of the previous version still running
-- during an upgrade.
CREATE FUNCTION runlane_start_counts(
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
              AND r.status IN ('pending', 'running', 'suspended', 'blocked', 'cancelling')
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

-- runlane_limit_counts (migration 0009) over runlane_start_counts.
CREATE FUNCTION runlane_limited_start_counts(
    p_lock_keys text[], p_quota_key text, p_quota_statuses text[], p_singleton_key text,
    p_limit integer, p_capacity integer, p_created_at timestamptz, p_id text,
    p_rate_key text, p_rate_limit integer, p_debounce_key text, p_now timestamptz
) RETURNS TABLE (
    quota_active bigint, key_active bigint, key_ahead bigint, rate_last timestamptz,
    debounced text
)
LANGUAGE plpgsql VOLATILE ROWS 1 AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(o.h)
    FROM (SELECT DISTINCT hashtextextended(k, 0) AS h FROM unnest(p_lock_keys) AS k ORDER BY h) AS o;
    RETURN QUERY SELECT
        g.quota_active, g.key_active, g.key_ahead,
        (SELECT r.rate_at FROM runlane_runs AS r
         WHERE r.rate_key = p_rate_key
         ORDER BY r.rate_at DESC OFFSET greatest(p_rate_limit, 1) - 1 LIMIT 1),
        (SELECT r.id FROM runlane_runs AS r
         WHERE r.debounce_key = p_debounce_key AND r.status = 'blocked' AND r.begin_at > p_now
         ORDER BY r.begin_at DESC, r.id DESC LIMIT 1)
    FROM runlane_start_counts(
        p_lock_keys, p_quota_key, p_quota_statuses, p_singleton_key, p_limit, p_capacity,
        p_created_at, p_id, p_now) AS g;
END
$$;
