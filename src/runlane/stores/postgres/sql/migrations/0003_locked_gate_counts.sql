-- What a gated start competes with, counted after taking its admission locks, in one statement.
--
-- The locks must come before the counting snapshot: a statement's snapshot is taken when it
-- starts, so counting in the statement that waited for the locks could miss a start committed
-- by the previous holder. A VOLATILE function runs each of its statements with a snapshot of its
-- own, taken when that statement starts: called from the start's statement, it holds the locks
-- (until the transaction ends) before it counts, so the counts see every run of the key as the
-- previous holder left it. A gated start is then one statement, atomic by itself.
--
-- The locks are taken in hash order, as lock_keys takes them, so two transactions never wait on
-- each other in a cycle; a lock the transaction already holds is taken again at no cost.
CREATE FUNCTION runlane_gate_counts(
    p_lock_keys text[], p_quota_key text, p_quota_statuses text[], p_singleton_key text
) RETURNS TABLE (quota_active bigint, key_active bigint, key_ahead bigint)
-- ROWS 1: it returns one row; the default estimate (1,000) inflates the caller's plan cost.
LANGUAGE plpgsql VOLATILE ROWS 1 AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(o.h)
    FROM (SELECT DISTINCT hashtextextended(k, 0) AS h FROM unnest(p_lock_keys) AS k ORDER BY h) AS o;
    RETURN QUERY SELECT
        (SELECT count(*) FROM runlane_runs AS r
         WHERE r.concurrency_key = p_quota_key AND r.status = ANY(p_quota_statuses)),
        k.active, k.ahead
    FROM (
        SELECT count(*) AS active,
               count(*) FILTER (WHERE r.holds_slot OR r.status <> 'cancelling') AS ahead
        FROM runlane_runs AS r
        WHERE r.singleton_key = p_singleton_key
          AND r.status IN ('pending', 'running', 'suspended', 'blocked', 'cancelling')
    ) AS k;
END
$$;
