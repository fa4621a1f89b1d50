-- Run-level rate limits, throttles and debounce.

-- A rate-limited run's key (a lane of its workflow) and the instant its start counts in the
-- key's sliding window (a throttled run's: the instant its window lets it begin).
ALTER TABLE runlane_runs ADD COLUMN rate_key text;
ALTER TABLE runlane_runs ADD COLUMN rate_at timestamptz;
-- A run held by its throttle or its debounce is blocked until this instant, and no singleton
-- waiter until then.
ALTER TABLE runlane_runs ADD COLUMN begin_at timestamptz;
-- A debounced run's key (a lane of its workflow): starts of it fold into the run until it begins.
ALTER TABLE runlane_runs ADD COLUMN debounce_key text;

-- A rate-limited start reads its key's most recent starts, newest first, up to its limit: an
-- index-only walk of at most ``limit`` entries.
CREATE INDEX runlane_runs_rate ON runlane_runs (rate_key, rate_at DESC) WHERE rate_key IS NOT NULL;
-- A debounced start looks for its key's held run; a run leaves this index once it is claimed.
CREATE INDEX runlane_runs_debounce ON runlane_runs (debounce_key, begin_at)
    WHERE debounce_key IS NOT NULL AND status = 'blocked';

-- What a limited start competes with, counted after taking its admission locks (its gates'
-- keys, its rate key, its debounce key), in one statement, as runlane_gate_counts does for a
-- gated start: the locks first, in a statement of their own, so the counts below see every run
-- of the keys as the previous holder left them. Besides the gates' counts: ``rate_last``, the
-- ``p_rate_limit``-th most recent instant the rate key counted a start at (NULL: fewer), and
-- ``debounced``, the held run of the debounce key a start would fold into (NULL: none).
CREATE FUNCTION runlane_limit_counts(
    p_lock_keys text[], p_quota_key text, p_quota_statuses text[], p_singleton_key text,
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
    FROM runlane_gate_counts(p_lock_keys, p_quota_key, p_quota_statuses, p_singleton_key) AS g;
END
$$;
