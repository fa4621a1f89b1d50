-- Statements of PostgresStore, one per "-- name:" block. Parameters are psycopg's %(name)s.
-- Lock order, everywhere: per-key advisory locks first (in hash order), then run rows. A
-- transaction that holds a row never waits for a key, so the two kinds of lock cannot deadlock.

-- name: active
-- (A fragment.) The statuses of a run that is not finished (models.ACTIVE_STATUSES): a paused
-- run is active (it keeps its slots, it counts against its quota).
('pending', 'running', 'suspended', 'blocked', 'paused', 'cancelling')

-- name: idle
-- (A fragment.) The statuses of a waiter no lease holds: a settlement may hand it its slot.
('pending', 'suspended', 'blocked')

-- name: pause_asked
-- (A fragment.) The statuses a run asked to pause may be in until it is paused: held by a turn,
-- or suspended while its remote turn is out.
('running', 'suspended')

-- name: failing
-- (A fragment.) The terminal statuses a run's failures count (a failure handler's).
('failed', 'dead')

-- name: leased
-- (A fragment.) The statuses of a run a lease holds.
('running', 'cancelling')

-- name: terminal
-- (A fragment.) The statuses of a finished run (models.TERMINAL_STATUSES), in the order of the
-- partial indexes' own condition (SQLite uses such an index only for the same term).
('cancelled', 'completed', 'dead', 'failed')

-- name: waiters
-- (A fragment.) The statuses of a key's runs that wait their turn for a slot (a cancelling or
-- paused one never does).
('pending', 'running', 'suspended', 'blocked')

-- name: waiting
-- (A fragment.) The statuses of a run that waits for its wake-up.
('suspended', 'blocked')

-- name: lock_parents_of_runs
-- The rows of the parents of several runs (a group of settlements under keys, after their key
-- locks), in id order: each settlement wakes its parent, so two groups in flight at once would
-- otherwise lock the parents they share in the order of their settlements, and could wait on
-- each other in a cycle.
SELECT p.id FROM runlane_runs AS p
WHERE p.id IN (SELECT parent_id FROM runlane_runs
               WHERE id = ANY(%(ids)s::text[]) AND parent_id IS NOT NULL)
ORDER BY p.id
FOR UPDATE;

-- name: lock_keys
-- Admission locks: the given keys plus the singleton key of one run (reading that key
-- unlocked is safe, a run's key never changes). Taken in hash order, so two transactions never
-- wait on each other in a cycle; held until commit.
SELECT pg_advisory_xact_lock(h)
FROM (
    SELECT DISTINCT hashtextextended(k, 0) AS h
    FROM (
        SELECT unnest(%(keys)s::text[]) AS k
        UNION ALL
        SELECT 's:' || singleton_key FROM runlane_runs
        WHERE id = %(run_id)s AND singleton_key IS NOT NULL
    ) AS named
    ORDER BY h
) AS ordered;

-- name: lock_keys_of_runs
-- ``lock_keys`` for the singleton keys of several runs (a group of settlements), in hash order.
SELECT pg_advisory_xact_lock(h)
FROM (
    SELECT DISTINCT hashtextextended('s:' || singleton_key, 0) AS h
    FROM runlane_runs
    WHERE id = ANY(%(ids)s::text[]) AND singleton_key IS NOT NULL
    ORDER BY h
) AS ordered;

-- name: lock_events
-- Event publishes take turns, so event seqs become visible in order: a waiter that read the
-- latest seq can never miss an event committed later with a smaller seq.
SELECT pg_advisory_xact_lock(hashtextextended('runlane:events', 0));

-- name: spec_rows
-- (A fragment.) The specs to create, sent as one JSON array of objects: one text parameter is
-- far cheaper to send than an array a column. A JSON null reads as SQL NULL; JSON values
-- travel as JSON text inside it (a nested value holding "\u0000" would not convert).
SELECT * FROM json_to_recordset(%(specs)s::json) AS g (
    id text, workflow text, version text, input text, tags text, created_at timestamptz,
    parent_id text, namespace text, priority integer, singleton_key text, singleton_limit integer,
    concurrency_key text, concurrency_limit integer, concurrency_statuses text[],
    deadline_at timestamptz, lease_owner text, lease_until timestamptz, wait_first float8,
    forked_from text, detached boolean, attributes text)

-- name: unlimited
-- (A fragment.) What ``insert_given`` reads of a start under no rate limit or debounce (a
-- continuation of a run that had one included: it skips the gates).
NULL::text AS rate_key, NULL::timestamptz AS rate_at, NULL::timestamptz AS begin_at,
NULL::text AS debounce_key, NULL::integer AS rate_limit, NULL::timestamptz AS rate_until

-- name: insert_given
-- Twin: models.run_from_spec, models.held_run, models.waiting_run, models.leased_run.
-- (A fragment.) Insert the rows of ``given`` as pending runs, or as running ones leased to
-- their creator where ``claimed`` (taking the slot, if keyed); an existing id is left alone.
-- A run its throttle or debounce holds (``begin_at``) is blocked until then, and its execution
-- timeout counts from then. A singleton run that waits behind a full key is created parked, as
-- a claim would park it (``blocked_set``): blocked until ``waits_until`` (its fallback's first
-- delay from now), one denial counted.
INSERT INTO runlane_runs (
    id, workflow, version, status, input, tags, created_at, updated_at, parent_id, namespace,
    priority, singleton_key, singleton_limit, concurrency_key, concurrency_limit,
    concurrency_statuses, deadline_at, lease_owner, lease_expires_at, holds_slot, rate_key,
    rate_at, begin_at, wake_at, debounce_key, rate_limit, rate_until, admission_retries,
    forked_from, detached, attributes, fence)
SELECT id, workflow, version,
       CASE WHEN claimed THEN 'running'
            WHEN begin_at IS NOT NULL OR waits_until IS NOT NULL THEN 'blocked'
            ELSE 'pending' END,
       input::json, ARRAY(SELECT json_array_elements_text(tags::json)), created_at, created_at,
       parent_id, namespace, priority, singleton_key, singleton_limit, concurrency_key,
       concurrency_limit, concurrency_statuses,
       coalesce(deadline_at + (begin_at - created_at), deadline_at),
       CASE WHEN claimed THEN lease_owner END, CASE WHEN claimed THEN lease_until END,
       claimed AND singleton_key IS NOT NULL, rate_key, rate_at, begin_at,
       coalesce(begin_at, waits_until), debounce_key, rate_limit, rate_until,
       CASE WHEN waits_until IS NOT NULL AND begin_at IS NULL THEN 1 ELSE 0 END,
       forked_from::json, coalesce(detached, false), attributes::jsonb,
       CASE WHEN claimed THEN 1 ELSE 0 END
FROM given
ON CONFLICT (id) DO NOTHING
RETURNING *

-- name: entry
-- (A fragment.) The entry in runlane_attribute_runs of the attribute ``e`` (a row of jsonb_each):
-- the hash of it as a one-attribute object (see migration 0023).
jsonb_hash_extended(jsonb_build_object(e.key, e.value), 0)

-- name: index_inserted
-- (A fragment: a CTE after ``inserted``.) The entries of the new runs' attributes, in the
-- statement that inserts them; a run without attributes has none.
indexed AS (
    INSERT INTO runlane_attribute_runs (entry, created_at, run_id)
    SELECT {entry}, i.created_at, i.id FROM inserted AS i, jsonb_each(i.attributes) AS e
)

-- name: insert_runs
-- Ungated specs in one statement: the new runs (``created``), then the ones that existed.
-- An id inserted by a transaction that committed after this statement began is in neither.
WITH given AS (
    SELECT s.*, s.lease_owner IS NOT NULL AS claimed, NULL::timestamptz AS waits_until,
           {unlimited}
    FROM ({spec_rows}) AS s
), inserted AS ({insert_given}), {index_inserted}
SELECT *, true AS created FROM inserted
UNION ALL
SELECT *, false AS created FROM runlane_runs WHERE id = ANY(%(ids)s::text[]);

-- name: insert_gated
-- One gated spec, its admission locks taken by ``gate_counts`` before it counts (so the counts
-- see every start that held the locks before): the existing run; or the new one when the gates
-- admit it (see ``admission``); or neither, with the counts the refusal is built from. The
-- existing run is looked for in this statement's snapshot, taken before the locks: a run of the
-- same id committed meanwhile makes the insert do nothing, and the caller reads it.
WITH existing AS (
    SELECT *, false AS created FROM runlane_runs WHERE id = ANY(%(ids)s::text[])
), counts AS ({gate_counts}), given AS (
    -- Claimed at once when a lease came with it and a claim would admit it now; parked at
    -- once when a claim now would park it (not a replacing start: it waits for the runs it
    -- cancels, not behind them).
    SELECT g.*, {unlimited}, g.lease_owner IS NOT NULL
                AND (g.singleton_key IS NULL OR c.key_ahead < g.singleton_limit) AS claimed,
           CASE WHEN c.key_ahead >= g.singleton_limit
                THEN %(now)s::timestamptz + make_interval(secs => g.wait_first) END AS waits_until
    FROM ({spec_rows}) AS g, counts AS c
    WHERE NOT EXISTS (SELECT 1 FROM existing)
      AND (%(quota_limit)s::integer IS NULL
           OR (%(quota_limit)s > 0 AND c.quota_active < %(quota_limit)s))
      AND (%(queue_capacity)s::integer IS NULL OR c.key_active < %(queue_capacity)s)
), inserted AS ({insert_given}), {index_inserted}
SELECT r.*, c.quota_active, c.key_active, c.key_ahead
FROM counts AS c
LEFT JOIN (SELECT *, true AS created FROM inserted UNION ALL SELECT * FROM existing) AS r ON true;

-- name: insert_gated_many
-- Gated specs of one batch, none under a rate limit or a debounce, whose admission keys are all
-- apart (no key is two specs'), their locks held already (``lock_keys``, an earlier statement of
-- the transaction, so this statement's snapshot sees every start that held them before): for
-- each, what its own ``insert_gated`` would do, in one statement. No spec counts another's run
-- (they share no key), so each one's counts are those it would have alone. ``gates``: each
-- spec's position in the batch and its key's capacity. One row per spec, in the batch's order.
WITH specs AS (
    SELECT g.*, q.ord, q.queue_capacity
    FROM ({spec_rows}) AS g
    JOIN json_to_recordset(%(gates)s::json) AS q (id text, ord integer, queue_capacity integer)
      ON q.id = g.id
), existing AS (
    SELECT *, false AS created FROM runlane_runs WHERE id = ANY(%(ids)s::text[])
), counts AS (
    SELECT s.id, c.quota_active, c.key_active, c.key_ahead
    FROM specs AS s, LATERAL runlane_start_counts(
        '{}'::text[], s.concurrency_key, s.concurrency_statuses, s.singleton_key,
        s.singleton_limit, s.queue_capacity, s.created_at, s.id, %(now)s) AS c
), given AS (
    -- As in ``insert_gated``: claimed at once when offered a lease and admitted now, parked at
    -- once when a claim now would park it.
    SELECT s.*, {unlimited}, s.lease_owner IS NOT NULL
                AND (s.singleton_key IS NULL OR c.key_ahead < s.singleton_limit) AS claimed,
           CASE WHEN c.key_ahead >= s.singleton_limit
                THEN %(now)s::timestamptz + make_interval(secs => s.wait_first) END AS waits_until
    FROM specs AS s JOIN counts AS c ON c.id = s.id
    WHERE s.id NOT IN (SELECT id FROM existing)
      AND (s.concurrency_limit IS NULL
           OR (s.concurrency_limit > 0 AND c.quota_active < s.concurrency_limit))
      AND (s.queue_capacity IS NULL OR c.key_active < s.queue_capacity)
), inserted AS ({insert_given}), {index_inserted}
SELECT r.*, c.quota_active, c.key_active, c.key_ahead
FROM specs AS s JOIN counts AS c ON c.id = s.id
LEFT JOIN (SELECT *, true AS created FROM inserted UNION ALL SELECT * FROM existing) AS r
  ON r.id = s.id
ORDER BY s.ord;

-- name: insert_limited
-- Twin: models.held_run, models.debounced_run (the fold into a held run).
-- One start under a rate limit or a debounce (and its gates), its locks taken by
-- ``limit_counts`` before it counts: the existing run of the id; else the start folded into its
-- debounce key's held run (``refolded``: the start's input, a later beginning); else the new
-- run when the rate limit and the gates admit it, held (blocked) until its throttle or debounce
-- begins it; else neither, with the counts the refusal is built from. As in ``insert_gated``,
-- the existing run and the held one are looked for in this statement's snapshot, taken before
-- the locks: one committed meanwhile makes the statement write nothing, and the caller retries.
WITH existing AS (
    SELECT *, false AS created FROM runlane_runs WHERE id = ANY(%(ids)s::text[])
), counts AS ({limit_counts}), refolded AS (
    UPDATE runlane_runs AS r
    SET input = %(input)s::json, updated_at = %(now)s,
        (begin_at, wake_at, deadline_at) = (
            SELECT b.at, b.at, coalesce(b.at + %(timeout)s::interval, r.deadline_at)
            FROM (SELECT GREATEST(LEAST(%(now)s + %(debounce_period)s::interval,
                                        r.created_at + %(max_wait)s::interval),
                                  r.rate_at) AS at) AS b)
    FROM counts AS c
    WHERE r.id = c.debounced AND NOT EXISTS (SELECT 1 FROM existing)
      AND r.status = 'blocked' AND r.begin_at > %(now)s
    RETURNING r.*
), timed AS (
    -- When the new run's start counts: now when refusing, the window's first room throttling.
    SELECT c.*, CASE WHEN %(rate_key)s::text IS NULL THEN NULL
                     WHEN %(delay)s THEN GREATEST(%(wanted)s, c.rate_last + %(rate_period)s::interval)
                     ELSE %(now)s END AS rate_at
    FROM counts AS c
), given AS (
    SELECT g.*, %(rate_key)s::text AS rate_key, t.rate_at, %(debounce_key)s::text AS debounce_key,
           %(rate_limit)s::integer AS rate_limit, t.rate_at + %(rate_period)s::interval AS rate_until,
           nullif(GREATEST(%(wanted)s, t.rate_at), %(now)s) AS begin_at,
           g.lease_owner IS NOT NULL AND GREATEST(%(wanted)s, t.rate_at) = %(now)s
           AND (g.singleton_key IS NULL OR t.key_ahead < g.singleton_limit) AS claimed,
           CASE WHEN t.key_ahead >= g.singleton_limit
                THEN %(now)s::timestamptz + make_interval(secs => g.wait_first) END AS waits_until
    FROM ({spec_rows}) AS g, timed AS t
    WHERE NOT EXISTS (SELECT 1 FROM existing) AND t.debounced IS NULL
      AND (%(delay)s OR t.rate_last IS NULL
           OR t.rate_last + %(rate_period)s::interval <= %(now)s)
      AND (%(quota_limit)s::integer IS NULL
           OR (%(quota_limit)s > 0 AND t.quota_active < %(quota_limit)s))
      AND (%(queue_capacity)s::integer IS NULL OR t.key_active < %(queue_capacity)s)
), inserted AS ({insert_given}), {index_inserted}
SELECT r.*, c.quota_active, c.key_active, c.key_ahead, c.rate_last, c.debounced
FROM counts AS c
LEFT JOIN (SELECT *, true AS created, false AS folded FROM inserted
           UNION ALL SELECT *, false, true FROM refolded
           UNION ALL SELECT *, false FROM existing) AS r ON true;

-- name: get_run
SELECT * FROM runlane_runs WHERE id = %(id)s;

-- name: get_runs
SELECT * FROM runlane_runs WHERE id = ANY(%(ids)s::text[]);

-- name: gate_counts
-- What a gated start competes with, once it holds ``lock_keys`` (see migration 0015). The
-- caller may hold them already: taking them again costs nothing.
SELECT quota_active, key_active, key_ahead
FROM runlane_start_counts(
    %(lock_keys)s::text[], %(quota_key)s, %(quota_statuses)s::text[], %(singleton_key)s,
    %(singleton_limit)s, %(queue_capacity)s, %(run_created_at)s, %(run_id)s, %(now)s);

-- name: limit_counts
-- What a limited start competes with, once it holds its locks (see migrations 0009 and 0015):
-- the gates' counts, its rate key's ``limit``-th most recent start, its debounce key's held run.
SELECT quota_active, key_active, key_ahead, rate_last, debounced
FROM runlane_limited_start_counts(
    %(lock_keys)s::text[], %(quota_key)s, %(quota_statuses)s::text[], %(singleton_key)s,
    %(singleton_limit)s, %(queue_capacity)s, %(run_created_at)s, %(run_id)s,
    %(rate_key)s, %(rate_limit)s, %(debounce_key)s, %(now)s);

-- name: active_of_key
SELECT id, status FROM runlane_runs
WHERE singleton_key = %(key)s
  AND status IN {active}
ORDER BY created_at, id
FOR NO KEY UPDATE;

-- name: pending_run_ids
SELECT id FROM runlane_runs
WHERE status = 'pending' AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
ORDER BY priority DESC, created_at, id
LIMIT %(limit)s;

-- name: due_run_ids
SELECT id FROM runlane_runs
WHERE status IN {waiting} AND wake_at <= %(now)s
  AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
ORDER BY wake_at, id
LIMIT %(limit)s;

-- name: expired_run_ids
SELECT id FROM runlane_runs
WHERE status IN {leased} AND lease_expires_at <= %(now)s
  AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
ORDER BY lease_expires_at, id
LIMIT %(limit)s;

-- name: timed_out_run_ids
SELECT id FROM runlane_runs
WHERE deadline_at <= %(now)s
  AND status IN {active}
  AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
ORDER BY deadline_at, id
LIMIT %(limit)s;

-- name: codes
-- (A fragment.) The codes an engine serves, one row each, from ``workflows``/``versions``
-- (parallel arrays).
unnest(%(workflows)s::text[], %(versions)s::text[]) AS c (workflow, version)

-- name: served
-- (A fragment.) The run's code is one the claimer serves (``workflows`` NULL: every code).
(%(workflows)s::text[] IS NULL
 OR (workflow, version) IN (SELECT * FROM unnest(%(workflows)s::text[], %(versions)s::text[])))

-- The claim queues of an engine that serves only some codes: each served (workflow, version)
-- walks its own index entries (runlane_runs_*_code, the code leading) in claim order up to the
-- limit, and the few rows found are ordered once more. Runs of other codes are never read.

-- name: pending_run_ids_served
SELECT r.id FROM {codes} CROSS JOIN LATERAL (
    SELECT id, priority, created_at FROM runlane_runs
    WHERE status = 'pending' AND workflow = c.workflow AND version = c.version
      AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
    ORDER BY priority DESC, created_at, id
    LIMIT %(limit)s
) AS r
ORDER BY r.priority DESC, r.created_at, r.id
LIMIT %(limit)s;

-- name: due_run_ids_served
SELECT r.id FROM {codes} CROSS JOIN LATERAL (
    SELECT id, wake_at FROM runlane_runs
    WHERE status IN {waiting} AND workflow = c.workflow AND version = c.version
      AND wake_at <= %(now)s AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
    ORDER BY wake_at, id
    LIMIT %(limit)s
) AS r
ORDER BY r.wake_at, r.id
LIMIT %(limit)s;

-- name: expired_run_ids_served
SELECT r.id FROM {codes} CROSS JOIN LATERAL (
    SELECT id, lease_expires_at FROM runlane_runs
    WHERE status IN {leased} AND workflow = c.workflow
      AND version = c.version AND lease_expires_at <= %(now)s
      AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
    ORDER BY lease_expires_at, id
    LIMIT %(limit)s
) AS r
ORDER BY r.lease_expires_at, r.id
LIMIT %(limit)s;

-- name: timed_out_run_ids_served
SELECT r.id FROM {codes} CROSS JOIN LATERAL (
    SELECT id, deadline_at FROM runlane_runs
    WHERE deadline_at IS NOT NULL
      AND status IN {active}
      AND workflow = c.workflow AND version = c.version AND deadline_at <= %(now)s
      AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
    ORDER BY deadline_at, id
    LIMIT %(limit)s
) AS r
ORDER BY r.deadline_at, r.id
LIMIT %(limit)s;

-- name: lock_run
-- A row another transaction holds is "not claimable now": claimers never queue behind each other.
SELECT * FROM runlane_runs WHERE id = %(id)s FOR NO KEY UPDATE SKIP LOCKED;

-- name: claim_plain
-- Twin: models.claimed_run.
-- The claim of a run that needs no admission (no singleton key, or one whose slot it holds) and
-- is no recovery, in one statement; nothing when the run is locked (``SKIP LOCKED``: not
-- claimable now) or not claimable this way. ``peek_*`` is the row as the statement's snapshot
-- saw it, unlocked, so the caller can tell whether the slower path (admission or recovery,
-- which takes the key lock first) might claim it.
WITH peek AS (
    SELECT id, status, wake_at, lease_expires_at, singleton_key, holds_slot, begin_at, workflow,
           version, pause_requested_at
    FROM runlane_runs WHERE id = %(id)s
), target AS (
    -- A run asked to pause is parked paused by the slower path instead (``park_paused``).
    SELECT id FROM runlane_runs
    WHERE id = %(id)s AND (singleton_key IS NULL OR holds_slot) AND {served}
      AND pause_requested_at IS NULL
      AND (status = 'pending'
           OR (status IN {waiting}
               AND ((%(handoff)s AND (begin_at IS NULL OR begin_at <= %(now)s))
                    OR wake_at <= %(now)s)))
    FOR NO KEY UPDATE SKIP LOCKED
), claimed AS (
    UPDATE runlane_runs AS r
    SET status = 'running', lease_owner = %(owner)s, lease_expires_at = %(lease_until)s,
        wake_at = NULL, wake_requested_at = NULL, updated_at = %(now)s, fence = r.fence + 1
    FROM target WHERE r.id = target.id
    RETURNING r.*
)
SELECT c.*, p.status AS peek_status, p.wake_at AS peek_wake_at,
       p.lease_expires_at AS peek_lease_expires_at, p.singleton_key AS peek_singleton_key,
       p.holds_slot AS peek_holds_slot, p.begin_at AS peek_begin_at,
       p.workflow AS peek_workflow, p.version AS peek_version,
       p.pause_requested_at AS peek_pause_requested_at
FROM peek AS p LEFT JOIN claimed AS c ON true;

-- name: blocked_set
-- Twin: models.blocked_run.
-- (A fragment.) A singleton waiter its claim did not admit: blocked until woken, or until its
-- fallback timer (see ``RetryTimer``: doubling at each denial in a row, up to the most).
SET status = 'blocked', wake_requested_at = NULL, lease_owner = NULL, lease_expires_at = NULL,
    wake_at = %(now)s + make_interval(secs => LEAST(
        %(retry_most)s::float8,
        %(retry_first)s::float8 * power(2, LEAST(r.admission_retries, 30)) * %(retry_jitter)s)),
    admission_retries = r.admission_retries + 1, updated_at = %(now)s

-- name: claim_admit
-- Twin: models.claimed_run, models.admitted_run, models.blocked_run.
-- The claim of a singleton run that does not hold a slot yet and is no recovery, after the key
-- lock (an earlier statement of the transaction, so this snapshot sees every run of the key as
-- the last lock holder left it): admitted when a slot is free for its FIFO rank (claimed, and
-- it takes the slot), else parked (``blocked_set``). No row when the run is not claimable this
-- way; always one row: the claimed run's columns (NULL when none) and whether it was parked.
WITH target AS (
    SELECT id, singleton_key, created_at, coalesce(nullif(singleton_limit, 0), 1) AS lim,
           handoff_at
    FROM runlane_runs
    WHERE id = %(id)s AND singleton_key IS NOT NULL AND NOT holds_slot AND {served}
      AND pause_requested_at IS NULL
      AND (status = 'pending'
           OR (status IN {waiting}
               AND ((%(handoff)s AND (begin_at IS NULL OR begin_at <= %(now)s))
                    OR wake_at <= %(now)s)))
    FOR NO KEY UPDATE SKIP LOCKED
), decision AS (
    -- A waiter is admitted when fewer of the key's waiters are ahead of it than there are free
    -- slots. Both counts stop early (the holders by their own index, the waiters ahead at the
    -- free slots), so a denial costs the same with 10 waiters or 10,000.
    SELECT t.id, CASE WHEN h.holders >= t.lim THEN false ELSE (
        SELECT count(*) FROM (
            SELECT 1 FROM runlane_runs AS k
            WHERE k.singleton_key = t.singleton_key AND NOT k.holds_slot
              AND k.status IN {waiters}
              AND (k.begin_at IS NULL OR k.begin_at <= %(now)s)
              AND (k.created_at, k.id) < (t.created_at, t.id)
            ORDER BY k.created_at, k.id
            LIMIT t.lim - h.holders
        ) AS ahead
    ) < t.lim - h.holders END AS admit
    FROM target AS t, LATERAL (
        SELECT count(*) AS holders FROM runlane_runs AS k
        WHERE k.singleton_key = t.singleton_key AND k.holds_slot
    ) AS h
), claimed AS (
    UPDATE runlane_runs AS r
    SET status = 'running', lease_owner = %(owner)s, lease_expires_at = %(lease_until)s,
        wake_at = NULL, wake_requested_at = NULL, updated_at = %(now)s, holds_slot = true,
        admission_retries = 0, handoff_at = NULL, fence = r.fence + 1
    FROM decision AS d WHERE r.id = d.id AND d.admit
    RETURNING r.*
), parked AS (
    UPDATE runlane_runs AS r {blocked_set}
    FROM decision AS d WHERE r.id = d.id AND NOT d.admit
    RETURNING r.id
)
SELECT c.*, EXISTS (SELECT 1 FROM parked) AS parked,
       (SELECT t.handoff_at FROM target AS t) AS released_at
FROM (SELECT 1) AS one
LEFT JOIN claimed AS c ON true;

-- name: lock_waiter_keys
-- The singleton keys' locks of the runs ``ids`` (reading a run's key unlocked is safe: it never
-- changes), in hash order as ``lock_keys`` takes them.
SELECT pg_advisory_xact_lock(h)
FROM (
    SELECT DISTINCT hashtextextended('s:' || singleton_key, 0) AS h FROM runlane_runs
    WHERE id = ANY(%(ids)s::text[]) AND singleton_key IS NOT NULL
    ORDER BY h
) AS ordered;

-- name: park_full_waiters
-- Twin: models.blocked_run.
-- The due waiters of ``timers`` whose key has every slot held, parked again as a claim's denial
-- parks one (``blocked_set``, each with its own timer), after their keys' locks
-- (``lock_waiter_keys``, an earlier statement, so this snapshot sees each key as the last lock
-- holder left it). A row another transaction holds is left to the caller's claim. Their ids.
WITH given AS (
    SELECT * FROM json_to_recordset(%(timers)s::json)
        AS g (id text, retry_first float8, retry_most float8, retry_jitter float8)
), full_key AS (
    SELECT g.* FROM given AS g JOIN runlane_runs AS r ON r.id = g.id
    WHERE r.status = 'blocked' AND NOT r.holds_slot AND r.singleton_key IS NOT NULL
      AND r.lease_owner IS NULL AND r.wake_at <= %(now)s
      AND (r.begin_at IS NULL OR r.begin_at <= %(now)s)
      AND (SELECT count(*) FROM runlane_runs AS h
           WHERE h.singleton_key = r.singleton_key AND h.holds_slot)
          >= coalesce(nullif(r.singleton_limit, 0), 1)
    ORDER BY r.id
    FOR NO KEY UPDATE OF r SKIP LOCKED
)
UPDATE runlane_runs AS r
SET status = 'blocked', wake_requested_at = NULL, lease_owner = NULL, lease_expires_at = NULL,
    wake_at = %(now)s + make_interval(secs => LEAST(
        f.retry_most, f.retry_first * power(2, LEAST(r.admission_retries, 30)) * f.retry_jitter)),
    admission_retries = r.admission_retries + 1, updated_at = %(now)s
FROM full_key AS f WHERE r.id = f.id
RETURNING r.id;

-- name: quiet_commit
-- This transaction need not wait for its WAL flush (see ``quiet_commit_if_parked``).
SELECT set_config('synchronous_commit', 'off', true);

-- name: quiet_commit_if_parked
-- The claim before parked its waiter (blocked, touched now): such a transaction need not wait
-- for its WAL flush. Lost in a server crash, the waiter is only due again a little earlier;
-- meanwhile the key's lock is released a flush sooner, and denials of one busy key (thousands
-- of waiters' fallback timers) are not serialised on the disk.
SELECT set_config('synchronous_commit', 'off', true) FROM runlane_runs
WHERE id = %(id)s AND status = 'blocked' AND updated_at = %(now)s;

-- name: add_recovery
UPDATE runlane_runs SET recoveries = recoveries + 1 WHERE id = %(id)s RETURNING recoveries;

-- name: admission_counts
-- Slot holders of the key, and the waiters ahead of this run in FIFO order (counted up to
-- ``most``: the caller only asks whether they fill the free slots). A run its throttle or
-- debounce still holds is no waiter yet.
SELECT
    (SELECT count(*) FROM runlane_runs WHERE singleton_key = %(key)s AND holds_slot) AS holders,
    (SELECT count(*) FROM (
        SELECT 1 FROM runlane_runs
        WHERE singleton_key = %(key)s AND NOT holds_slot
          AND status IN {waiters}
          AND (begin_at IS NULL OR begin_at <= %(now)s)
          AND (created_at, id) < (%(created_at)s, %(id)s)
        ORDER BY created_at, id
        LIMIT %(most)s) AS ahead
    ) AS ahead;

-- name: claim
-- Twin: models.claimed_run, models.admitted_run.
UPDATE runlane_runs
SET status = 'running', lease_owner = %(owner)s, lease_expires_at = %(lease_until)s,
    wake_at = NULL, wake_requested_at = NULL, updated_at = %(now)s,
    holds_slot = holds_slot OR %(admit)s,
    admission_retries = CASE WHEN %(admit)s THEN 0 ELSE admission_retries END, fence = fence + 1
WHERE id = %(id)s
RETURNING *;

-- name: park
UPDATE runlane_runs AS r {blocked_set}
WHERE r.id = %(id)s;

-- name: step_for_result
-- Locks the run (a turn's fenced writes lock it too) and the record a worker reports on. Both
-- rows are locked so that, after waiting for a concurrent writer, both are read as it left them.
SELECT r.status AS run_status, r.queued, s.status, s.attempts, s.fence
FROM runlane_runs AS r JOIN runlane_steps AS s ON s.run_id = r.id AND s.seq = %(seq)s
WHERE r.id = %(id)s
FOR NO KEY UPDATE;

-- name: record_step_result
UPDATE runlane_steps
SET status = %(status)s, output = %(output)s::json, error = %(error)s::json, wake_at = NULL,
    finished_at = %(now)s
WHERE run_id = %(id)s AND seq = %(seq)s;

-- name: record_heartbeat
-- The share lock waits out a concurrent settlement of the run, then sees it terminal. A beat of
-- an older fence than the record's is a stale execution's (models.older_fence).
WITH run AS (
    SELECT id FROM runlane_runs
    WHERE id = %(id)s AND status IN {active}
    FOR SHARE
)
UPDATE runlane_steps AS s SET last_heartbeat_at = %(at)s
FROM run
WHERE s.run_id = run.id AND s.seq = %(seq)s AND s.status = 'running'
  AND s.attempts = %(attempt)s
  AND (%(fence)s::bigint IS NULL OR s.fence IS NULL OR s.fence <= %(fence)s)
RETURNING s.seq;

-- name: get_step
SELECT * FROM runlane_steps WHERE run_id = %(id)s AND seq = %(seq)s;

-- name: steps_of
SELECT * FROM runlane_steps WHERE run_id = %(id)s ORDER BY seq;

-- name: reply_to
SELECT * FROM runlane_steps
WHERE run_id = %(id)s AND kind = 'reply' AND input->>'update' = %(update)s
ORDER BY seq LIMIT 1;

-- name: signals_of
SELECT * FROM runlane_signals WHERE run_id = %(id)s ORDER BY id;

-- name: hand_off_due
-- Due runs for the run queue: rows another instance is taking are skipped, not waited for.
WITH due AS (
    SELECT id, wake_at AS was_due FROM runlane_runs
    WHERE status IN {waiting} AND wake_at <= %(now)s
      AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
    ORDER BY wake_at, id
    LIMIT %(limit)s
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE runlane_runs AS r SET wake_at = %(hold_until)s
FROM due WHERE r.id = due.id
RETURNING r.*, due.was_due;

-- name: hand_off_due_served
-- ``hand_off_due`` of the served codes: the first due runs of each (as ``due_run_ids_served``
-- finds them), then those not taken by another instance at this moment, locked.
WITH candidates AS (
    SELECT r.id FROM {codes} CROSS JOIN LATERAL (
        SELECT id, wake_at FROM runlane_runs
        WHERE status IN {waiting} AND workflow = c.workflow
          AND version = c.version AND wake_at <= %(now)s
          AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
        ORDER BY wake_at, id
        LIMIT %(limit)s
    ) AS r
    ORDER BY r.wake_at, r.id
    LIMIT %(limit)s
), due AS (
    SELECT id, wake_at AS was_due FROM runlane_runs
    WHERE id IN (SELECT id FROM candidates)
      AND status IN {waiting} AND wake_at <= %(now)s
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE runlane_runs AS r SET wake_at = %(hold_until)s
FROM due WHERE r.id = due.id
RETURNING r.*, due.was_due;

-- name: renew_leases
-- Every lease an engine holds, in one statement; a run no longer held by its owner is skipped.
UPDATE runlane_runs AS r SET lease_expires_at = %(lease_until)s
FROM unnest(%(ids)s::text[], %(owners)s::text[]) AS l (id, owner)
WHERE r.id = l.id AND r.lease_owner = l.owner AND r.status IN {leased}
RETURNING r.id;

-- name: step_columns
-- (A fragment.) A step record as the JSON documents of ``fenced_writes`` carry it.
seq integer, name text, kind text, status text, input text, output text, error text,
attempts integer, started_at timestamptz, finished_at timestamptz,
last_heartbeat_at timestamptz, wake_at timestamptz, dispatches integer, fence bigint

-- name: upsert_steps
-- (A fragment.) Writes the records of ``step_rows`` (run_id, then ``step_columns``).
INSERT INTO runlane_steps (
    run_id, seq, name, kind, status, input, output, error, attempts, started_at,
    finished_at, last_heartbeat_at, wake_at, dispatches, fence)
SELECT run_id, seq, name, kind, status, input::json, output::json, error::json, attempts,
       started_at, finished_at, last_heartbeat_at, wake_at, dispatches, fence
FROM step_rows
ON CONFLICT (run_id, seq) DO UPDATE SET
    name = EXCLUDED.name, kind = EXCLUDED.kind, status = EXCLUDED.status,
    input = EXCLUDED.input, output = EXCLUDED.output, error = EXCLUDED.error,
    attempts = EXCLUDED.attempts, started_at = EXCLUDED.started_at,
    finished_at = EXCLUDED.finished_at, last_heartbeat_at = EXCLUDED.last_heartbeat_at,
    wake_at = EXCLUDED.wake_at, dispatches = EXCLUDED.dispatches, fence = EXCLUDED.fence

-- name: insert_history
-- A fork's records (copied from the run it forks), written with its run in one transaction.
WITH step_rows AS (
    SELECT %(id)s::text AS run_id, s.* FROM json_to_recordset(%(steps)s::json) AS s ({step_columns})
)
{upsert_steps};

-- name: fenced_writes
-- (A fragment of the statements below.) Locks the run while ``owner`` holds its lease (with
-- ``owner`` NULL: whatever its state, for settlements outside a turn; the caller holds the
-- run's key lock). ``ok`` is the fenced row when the writes may go ahead: every write below
-- reads it, so a lost lease (or a cancellation the caller may not write through) writes nothing.
WITH fence AS (
    SELECT id, status, holds_slot, singleton_key, singleton_limit, parent_id, wake_requested_at,
           queued
    FROM runlane_runs
    WHERE id = %(id)s
      AND (%(owner)s::text IS NULL
           OR (lease_owner = %(owner)s AND status IN {leased}))
    FOR NO KEY UPDATE
), {writes_of_ok}

-- name: writes_of_ok
-- (A fragment.) ``ok`` (the fence when the writes may go ahead), the step records and the
-- consumed signals written through it.
ok AS (
    SELECT * FROM fence WHERE status <> 'cancelling' OR %(allow_cancelling)s
), step_rows AS (
    SELECT ok.id AS run_id, s.* FROM ok, json_to_recordset(%(steps)s::json) AS s ({step_columns})
), upserted AS ({upsert_steps}), consumed AS (
    DELETE FROM runlane_signals
    WHERE run_id IN (SELECT id FROM ok) AND id = ANY(%(signal_ids)s::bigint[])
)

-- name: checkpoint
-- One statement, so one round trip and one commit: the fence, the records, the consumed
-- signals and the run's touch. The touch is the fence: one update of the run while ``owner``
-- holds its lease, so the run gets one new row version and no row lock before it (a run being
-- cancelled keeps its ``updated_at`` unless the writes go through). ``status`` tells the
-- caller which fence failed, if one did.
WITH fence AS (
    UPDATE runlane_runs AS r
    SET updated_at = CASE WHEN r.status <> 'cancelling' OR %(allow_cancelling)s
                          THEN %(now)s ELSE r.updated_at END
    WHERE r.id = %(id)s AND r.lease_owner = %(owner)s AND r.status IN {leased}
    RETURNING r.id, r.status, r.pause_requested_at IS NOT NULL AS pausing
), {writes_of_ok}
SELECT status, EXISTS (SELECT 1 FROM ok) AS written, pausing FROM fence;

-- name: set_attributes
-- A checkpoint (as ``checkpoint``) whose touch of the run merges the attributes into the run's:
-- still one update of the row in the statement, heap-only as a checkpoint's (no index of the
-- run reads its attributes). When the merge goes ahead, the entries of the attributes it
-- changed go (``stale``) and those of the new values come (``fresh``). ``before`` is the row
-- as this statement's snapshot saw it: only the lease holder writes attributes, so the row the
-- fence updates has the same ones. The stale entries are looked up by their whole key, the
-- hashes computed once (an array): given them one attribute at a time, the planner may read
-- the run's entries by their key's other columns alone, every entry of the table.
WITH before AS (
    SELECT attributes FROM runlane_runs WHERE id = %(id)s
), fence AS (
    UPDATE runlane_runs AS r
    SET updated_at = CASE WHEN r.status <> 'cancelling' OR %(allow_cancelling)s
                          THEN %(now)s ELSE r.updated_at END,
        attributes = CASE WHEN r.status <> 'cancelling' OR %(allow_cancelling)s
                          THEN coalesce(r.attributes, '{}') || %(attributes)s::jsonb
                          ELSE r.attributes END
    WHERE r.id = %(id)s AND r.lease_owner = %(owner)s AND r.status IN {leased}
    RETURNING r.id, r.status, r.created_at, r.attributes
), {writes_of_ok}, stale AS (
    DELETE FROM runlane_attribute_runs AS a USING ok
    WHERE a.entry = ANY(ARRAY(
              SELECT {entry} FROM ok AS n, before AS b, jsonb_each(b.attributes) AS e
              WHERE NOT n.attributes @> jsonb_build_object(e.key, e.value)))
      AND a.created_at = ok.created_at AND a.run_id = ok.id
), fresh AS (
    INSERT INTO runlane_attribute_runs (entry, created_at, run_id)
    SELECT {entry}, ok.created_at, ok.id
    FROM ok, before AS b, jsonb_each(ok.attributes) AS e
    WHERE b.attributes IS NULL OR NOT b.attributes @> jsonb_build_object(e.key, e.value)
)
SELECT status, EXISTS (SELECT 1 FROM ok) AS written FROM fence;

-- name: checkpoint_many
-- Group commit: the checkpoints of several runs in one statement, each run fenced on its own
-- as ``checkpoint`` fences one (a run whose lease is gone, or that is being cancelled, writes
-- nothing; the others go ahead). The rows are locked in id order, as ``lock_runs`` locks them.
-- One row per given run; ``status`` is NULL where the lease was not held.
WITH given AS (
    SELECT * FROM json_to_recordset(%(batch)s::json)
        AS g (id text, owner text, now timestamptz, steps json, signal_ids bigint[])
), fence AS (
    SELECT r.id, r.status, r.pause_requested_at IS NOT NULL AS pausing
    FROM runlane_runs AS r JOIN given AS g ON g.id = r.id
    WHERE r.lease_owner = g.owner AND r.status IN {leased}
    ORDER BY r.id
    FOR NO KEY UPDATE OF r
), ok AS (
    SELECT g.* FROM given AS g JOIN fence AS f ON f.id = g.id WHERE f.status <> 'cancelling'
), step_rows AS (
    SELECT ok.id AS run_id, s.* FROM ok, json_to_recordset(ok.steps) AS s ({step_columns})
), upserted AS ({upsert_steps}), consumed AS (
    DELETE FROM runlane_signals AS s USING ok
    WHERE s.run_id = ok.id AND s.id = ANY(ok.signal_ids)
), touched AS (
    UPDATE runlane_runs AS r SET updated_at = ok.now FROM ok WHERE r.id = ok.id
)
SELECT g.id, f.status, ok.id IS NOT NULL AS written, f.pausing
FROM given AS g LEFT JOIN fence AS f ON f.id = g.id LEFT JOIN ok ON ok.id = g.id;

-- name: suspend
-- The writes and the suspension in one statement; a wake requested during the turn leaves the
-- run due now (``rewake``).
{fenced_writes}, suspended AS (
    -- A run asked to pause during the turn is parked paused (models.suspended_run).
    UPDATE runlane_runs AS r
    SET status = CASE WHEN r.pause_requested_at IS NULL THEN %(status)s ELSE 'paused' END,
        wake_at = CASE WHEN ok.wake_requested_at IS NULL THEN %(wake_at)s ELSE %(now)s END,
        wake_requested_at = NULL, lease_owner = NULL, lease_expires_at = NULL,
        pause_requested_at = NULL, updated_at = %(now)s
    FROM ok WHERE r.id = ok.id
    RETURNING ok.wake_requested_at IS NOT NULL AND r.pause_requested_at IS NULL AS rewake
)
SELECT status, EXISTS (SELECT 1 FROM ok) AS written, (SELECT rewake FROM suspended) AS rewake
FROM fence;

-- name: rewake_for_events
-- After ``suspend``, under ``lock_events``: the run is due at once when an event one of its new
-- waits has not read was published while its turn ran (that publish saw no wait to wake).
UPDATE runlane_runs SET wake_at = %(now)s
WHERE id = %(id)s AND status IN {waiting} AND lease_owner IS NULL
  AND EXISTS (
    SELECT 1 FROM unnest(%(names)s::text[], %(afters)s::bigint[]) AS w (name, after)
    WHERE EXISTS (SELECT 1 FROM runlane_events e WHERE e.name = w.name AND e.seq > w.after))
RETURNING id;

-- name: settle
-- Twin: models.settled_run; the hand-off: models.claimed_run, models.admitted_run.
-- The writes and a terminal settlement in one statement: the run's signals go, a failure is
-- counted, its singleton slot is released and the oldest waiters for the key's free slots are
-- woken (after a waiter too: it may have been woken for a slot it will not take now), and so
-- is its parent.
-- With a successor lease, a released slot's first waiter is not woken but takes the slot at
-- once, leased to the successor (unless another claimer holds its lease: then it is woken).
-- The caller holds the key lock (taken in an earlier statement, so this statement's snapshot
-- sees every run of the key as the last lock holder left it). The snapshot still shows this
-- run holding its slot, hence the ``id <> ok.id`` below. The row's run columns are the
-- successor's, or NULL.
{fenced_writes}, dropped AS (
    DELETE FROM runlane_signals WHERE run_id IN (SELECT id FROM ok)
), finished AS (
    UPDATE runlane_runs AS r
    SET status = %(status)s, output = %(output)s::json, error = %(error)s::json,
        holds_slot = false, lease_owner = NULL, lease_expires_at = NULL, wake_at = NULL,
        wake_requested_at = NULL, pause_requested_at = NULL, updated_at = %(now)s,
        settled_at = %(now)s,
        failures = r.failures + CASE WHEN %(status)s IN {failing} THEN 1 ELSE 0 END
    FROM ok WHERE r.id = ok.id
    RETURNING r.id
), waiters AS (
    SELECT w.id, w.status, w.created_at FROM runlane_runs AS w
    WHERE w.singleton_key = (SELECT singleton_key FROM ok) AND w.id <> (SELECT id FROM ok)
      AND NOT w.holds_slot AND w.status IN {waiters}
      AND (w.begin_at IS NULL OR w.begin_at <= %(now)s)
    ORDER BY w.created_at, w.id
    LIMIT (
        SELECT GREATEST(0, coalesce(nullif(ok.singleton_limit, 0), 1) - count(h.id))
        FROM ok LEFT JOIN runlane_runs AS h
          ON h.singleton_key = ok.singleton_key AND h.holds_slot AND h.id <> ok.id
        GROUP BY ok.id, ok.singleton_limit)
), handed AS (
    UPDATE runlane_runs AS r
    SET status = 'running', holds_slot = true, lease_owner = %(successor)s,
        lease_expires_at = %(successor_until)s, wake_at = NULL, wake_requested_at = NULL,
        updated_at = %(now)s, fence = r.fence + 1
    FROM (SELECT id, status FROM waiters ORDER BY created_at, id LIMIT 1) AS first
    WHERE r.id = first.id AND %(successor)s::text IS NOT NULL
      AND first.status IN {idle} AND {served}
      AND EXISTS (SELECT FROM finished) AND (SELECT holds_slot FROM ok)
    RETURNING r.*,
        -- A waiter that never ran and was sent nothing (the common case) needs no second read.
        EXISTS (SELECT FROM runlane_steps WHERE run_id = r.id)
            OR EXISTS (SELECT FROM runlane_signals WHERE run_id = r.id) AS has_history
), woken AS (
    -- The waiters are stamped with the release (the hand-off metric's start; the claim that
    -- admits one reads and clears it, on whichever engine).
    UPDATE runlane_runs {wake_set},
        handoff_at = CASE WHEN id IN (SELECT id FROM waiters) THEN %(now)s ELSE handoff_at END
    WHERE id IN (SELECT id FROM waiters UNION ALL SELECT parent_id FROM ok)
      AND id NOT IN (SELECT id FROM handed)
      AND status IN {active}
    RETURNING id
)
SELECT h.*, fence.status AS fence_status, fence.parent_id AS fence_parent_id,
       fence.queued AS fence_queued, f.id IS NOT NULL AS written,
       ARRAY(SELECT id FROM waiters WHERE id NOT IN (SELECT id FROM handed)
             ORDER BY created_at, id) AS waiters,
       fence.parent_id IN (SELECT id FROM woken) AS parent_woken
FROM fence LEFT JOIN finished AS f ON true LEFT JOIN handed AS h ON true;

-- name: settle_many
-- Twin: models.settled_run.
-- Group commit of settlements: runs without a singleton key, a step queue, children, a
-- continuation or a handler (the caller knows), each fenced on its own as ``settle`` fences one;
-- a run that is being cancelled settles only cancelled. Each written run's signals go, a failure
-- is counted, and its parent is woken if it waits. Rows locked in id order (``lock_runs``);
-- one row per given run, ``status`` NULL where the lease was not held; the columns ``settle``
-- returns for a settlement that hands no slot on.
WITH given AS (
    SELECT * FROM json_to_recordset(%(batch)s::json) AS g (
        id text, owner text, now timestamptz, steps json, status text, output text, error text)
), fence AS (
    SELECT r.id, r.status, r.parent_id, r.queued
    FROM runlane_runs AS r JOIN given AS g ON g.id = r.id
    WHERE r.lease_owner = g.owner AND r.status IN {leased}
    ORDER BY r.id
    FOR NO KEY UPDATE OF r
), ok AS (
    SELECT g.* FROM given AS g JOIN fence AS f ON f.id = g.id
    WHERE f.status <> 'cancelling' OR g.status = 'cancelled'
), step_rows AS (
    SELECT ok.id AS run_id, s.* FROM ok, json_to_recordset(ok.steps) AS s ({step_columns})
), upserted AS ({upsert_steps}), dropped AS (
    DELETE FROM runlane_signals AS s USING ok WHERE s.run_id = ok.id
), finished AS (
    UPDATE runlane_runs AS r
    SET status = ok.status, output = ok.output::json, error = ok.error::json,
        holds_slot = false, lease_owner = NULL, lease_expires_at = NULL, wake_at = NULL,
        wake_requested_at = NULL, pause_requested_at = NULL, updated_at = ok.now,
        settled_at = ok.now,
        failures = r.failures + CASE WHEN ok.status IN {failing} THEN 1 ELSE 0 END
    FROM ok WHERE r.id = ok.id
    RETURNING r.id
), woken AS (
    UPDATE runlane_runs {wake_set}
    WHERE id IN (SELECT f.parent_id FROM fence AS f JOIN ok ON ok.id = f.id)
      AND status IN {active}
    RETURNING id
)
SELECT g.id, f.status, ok.id IS NOT NULL AS written, f.queued AS fence_queued,
       f.parent_id AS fence_parent_id, ARRAY[]::text[] AS waiters,
       f.parent_id IN (SELECT id FROM woken) AS parent_woken
FROM given AS g LEFT JOIN fence AS f ON f.id = g.id LEFT JOIN ok ON ok.id = g.id;

-- name: record_error
-- A settled run's error, rewritten in its settling transaction (a failure handler's refusal).
UPDATE runlane_runs SET error = %(error)s::json WHERE id = %(id)s;

-- name: wake_set
-- (A fragment.) A waiting run becomes due now; a leased one, or one awaiting a remote decision,
-- is told to stay due when its turn suspends (the decision's apply suspends it).
SET wake_at = CASE WHEN status IN {waiting} AND NOT awaits_decision THEN %(now)s
                   ELSE wake_at END,
    updated_at = CASE WHEN status IN {waiting} AND NOT awaits_decision
                      THEN %(now)s ELSE updated_at END,
    wake_requested_at = CASE WHEN status IN {leased} OR awaits_decision
                             THEN %(now)s ELSE wake_requested_at END

-- name: wake
UPDATE runlane_runs {wake_set}
WHERE id = ANY(%(ids)s::text[])
  AND status IN {active}
RETURNING id, awaits_decision;

-- name: await_decision
-- Twin: models.awaiting_decision.
-- A remote workflow's turn goes out: the leased run is marked with the turn's task id, parked
-- until the turn's deadline and released, in one fenced statement (a cancelled run: nothing).
-- A run asked to pause during the turn is parked paused instead, and no turn goes out.
WITH fence AS (
    SELECT id, status, pause_requested_at IS NOT NULL AS pausing FROM runlane_runs
    WHERE id = %(id)s AND lease_owner = %(owner)s AND status IN {leased}
    FOR NO KEY UPDATE
), parked AS (
    UPDATE runlane_runs AS r
    SET status = CASE WHEN fence.pausing THEN 'paused' ELSE 'suspended' END,
        awaiting_decision_task_id = CASE WHEN fence.pausing THEN NULL ELSE %(task_id)s END,
        wake_at = %(deadline)s, lease_owner = NULL, lease_expires_at = NULL,
        pause_requested_at = NULL, updated_at = %(now)s
    FROM fence WHERE r.id = fence.id AND fence.status = 'running'
    RETURNING r.id
)
SELECT status, EXISTS (SELECT 1 FROM parked) AS written, pausing FROM fence;

-- name: park_paused
-- A claim of a run asked to pause while a turn held it (the lease expired before the turn's
-- next write, or its remote turn came due), the row locked and found claimable: paused now
-- (models.suspended_run), instead of leased.
UPDATE runlane_runs
SET status = 'paused', lease_owner = NULL, lease_expires_at = NULL, wake_requested_at = NULL,
    pause_requested_at = NULL, updated_at = %(now)s
WHERE id = %(id)s AND pause_requested_at IS NOT NULL AND status IN {pause_asked};

-- name: pause_run
-- A pause (models.paused_run): a leased run, or one whose remote turn is out, is asked to
-- pause; any other active run is paused now. The row as it was (no row: unknown), and whether
-- the pause applied (models.pausable).
WITH found AS (
    SELECT id, status, pause_requested_at FROM runlane_runs WHERE id = %(id)s
    FOR NO KEY UPDATE
), paused AS (
    UPDATE runlane_runs AS r
    SET status = CASE WHEN r.status = 'running' OR r.awaiting_decision_task_id IS NOT NULL
                      THEN r.status ELSE 'paused' END,
        pause_requested_at = CASE WHEN r.status = 'running'
                                       OR r.awaiting_decision_task_id IS NOT NULL
                                  THEN %(now)s END,
        updated_at = %(now)s
    FROM found AS f
    WHERE r.id = f.id AND f.pause_requested_at IS NULL
      AND f.status IN {waiters}
    RETURNING r.id, r.status, r.singleton_key, r.singleton_limit, r.holds_slot
)
SELECT f.id, EXISTS (SELECT 1 FROM paused) AS changed,
       p.singleton_key, coalesce(nullif(p.singleton_limit, 0), 1) AS singleton_limit,
       coalesce(p.status = 'paused' AND p.singleton_key IS NOT NULL AND NOT p.holds_slot, false)
           AS left_line
FROM found AS f LEFT JOIN paused AS p ON true;

-- name: wake_free_waiters
-- A waiter left the key's line (paused): a release may have woken it for a slot it will not
-- take now, so the key's oldest waiters for its free slots are woken, as a settlement's are
-- (models.leaves_line). The caller holds the key lock.
WITH waiters AS (
    SELECT w.id FROM runlane_runs AS w
    WHERE w.singleton_key = %(key)s AND NOT w.holds_slot
      AND w.status IN {waiters}
      AND (w.begin_at IS NULL OR w.begin_at <= %(now)s)
    ORDER BY w.created_at, w.id
    LIMIT (SELECT GREATEST(0, %(most)s - count(*)) FROM runlane_runs AS h
           WHERE h.singleton_key = %(key)s AND h.holds_slot)
)
UPDATE runlane_runs {wake_set}, handoff_at = %(now)s
WHERE id IN (SELECT id FROM waiters) AND status IN {active}
RETURNING id;

-- name: resume_run
-- A resume (models.resumed_run): a paused run is due now (a singleton waiter without its slot,
-- or a run its throttle or debounce still holds, blocked: the held one until it begins); a
-- pause asked and not taken yet is withdrawn. Whether it applied (no row: unknown run).
WITH found AS (
    SELECT id, status, pause_requested_at FROM runlane_runs WHERE id = %(id)s
    FOR NO KEY UPDATE
), resumed AS (
    UPDATE runlane_runs AS r
    SET status = CASE WHEN r.status <> 'paused' THEN r.status
                      WHEN (r.singleton_key IS NOT NULL AND NOT r.holds_slot)
                           OR r.begin_at > %(now)s THEN 'blocked'
                      ELSE 'suspended' END,
        wake_at = CASE WHEN r.status <> 'paused' THEN r.wake_at
                       WHEN r.begin_at > %(now)s THEN r.begin_at ELSE %(now)s END,
        pause_requested_at = NULL, updated_at = %(now)s
    FROM found AS f
    WHERE r.id = f.id
      AND (f.status = 'paused'
           OR (f.pause_requested_at IS NOT NULL
               AND f.status NOT IN {terminal}))
    RETURNING r.id
)
SELECT f.id, EXISTS (SELECT 1 FROM resumed) AS changed FROM found AS f;

-- name: claim_decision
-- Twin: models.claimed_run.
-- The lease to apply the decision of the turn the run awaits, only while it awaits that task
-- id; ``wake_requested_at`` is kept (a wake that landed while the turn was out rewakes it).
UPDATE runlane_runs
SET status = 'running', lease_owner = %(owner)s, lease_expires_at = %(lease_until)s,
    wake_at = NULL, awaiting_decision_task_id = NULL, updated_at = %(now)s, fence = fence + 1
WHERE id = %(id)s AND status = 'suspended' AND awaiting_decision_task_id = %(task_id)s
  AND {served}
RETURNING *;

-- name: extend_decision
-- A worker beats for the turn: its deadline moves forward, only while the run awaits it.
UPDATE runlane_runs SET wake_at = GREATEST(wake_at, %(deadline)s)
WHERE id = %(id)s AND status = 'suspended' AND awaiting_decision_task_id = %(task_id)s
RETURNING id;

-- name: run_tree
-- A run and the descendants a cancellation reaches (a detached child and its own are left
-- out), parents before children.
WITH RECURSIVE tree AS (
    SELECT id, parent_id, created_at, 0 AS depth FROM runlane_runs WHERE id = %(id)s
    UNION ALL
    SELECT c.id, c.parent_id, c.created_at, t.depth + 1
    FROM runlane_runs AS c JOIN tree AS t ON c.parent_id = t.id
    WHERE NOT c.detached
)
SELECT tree.id, tree.parent_id, r.singleton_key
FROM tree JOIN runlane_runs AS r ON r.id = tree.id
ORDER BY tree.depth, tree.created_at, tree.id;

-- name: lock_runs
SELECT id, status FROM runlane_runs WHERE id = ANY(%(ids)s::text[]) ORDER BY id FOR NO KEY UPDATE;

-- name: mark_cancelling
-- Twin: models.cancelling_run.
UPDATE runlane_runs SET status = 'cancelling', updated_at = %(now)s, error = %(error)s::json
WHERE id = %(id)s;

-- name: rearm_held
-- A held run a hand-off came too early for (by the claimer's clock): the hand-off pushed its
-- wake time a lease ahead, so it is made due at its begin_at again, not a lease late.
UPDATE runlane_runs SET wake_at = begin_at
WHERE id = %(id)s AND status IN {waiting} AND begin_at > %(now)s
  AND wake_at > begin_at;

-- name: lock_run_wait
SELECT * FROM runlane_runs WHERE id = %(id)s FOR NO KEY UPDATE;

-- name: drop_unfinished_steps
DELETE FROM runlane_steps WHERE run_id = %(id)s AND status <> 'completed';

-- name: requeue
-- Twin: models.requeued_run.
UPDATE runlane_runs
SET status = 'pending', output = NULL, error = NULL, holds_slot = false, recoveries = 0,
    lease_owner = NULL, lease_expires_at = NULL, wake_at = NULL, wake_requested_at = NULL,
    begin_at = NULL, deadline_at = %(deadline_at)s, updated_at = %(now)s, settled_at = NULL
WHERE id = %(id)s
RETURNING *;

-- name: signal_target
-- Whether the run (locked by the statement before) waits for a signal of this name (or for
-- an update: the wait's kind is %(kind)s).
SELECT status, EXISTS (
    SELECT 1 FROM runlane_steps
    WHERE run_id = %(id)s AND kind = %(kind)s AND name = %(name)s AND status = 'pending'
) AS waits, awaits_decision
FROM runlane_runs WHERE id = %(id)s;

-- name: insert_signal
INSERT INTO runlane_signals (run_id, name, payload, created_at)
VALUES (%(id)s, %(name)s, %(payload)s::json, %(now)s);

-- name: event_by_id
SELECT * FROM runlane_events WHERE id = %(event_id)s;

-- name: insert_event
INSERT INTO runlane_events (id, name, payload, created_at)
VALUES (%(event_id)s, %(name)s, %(payload)s::json, %(now)s)
RETURNING *;

-- name: event_waiters
SELECT id FROM runlane_runs
WHERE status IN {active}
  AND id IN (
    SELECT run_id FROM runlane_steps
    WHERE kind = 'event' AND name = %(name)s AND status = 'pending')
ORDER BY created_at, id;

-- name: events_after
SELECT * FROM runlane_events WHERE name = %(name)s AND seq > %(after)s ORDER BY seq LIMIT %(limit)s;

-- name: latest_event_seq
SELECT coalesce(max(seq), 0) AS seq FROM runlane_events;

-- name: list_runs
-- {filters} is filled from a fixed set of column conditions, see PostgresStore.list_runs.
SELECT * FROM runlane_runs {filters}
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: page_runs
-- {filters} is filled from a fixed set of conditions, see PostgresStore.page_runs.
SELECT * FROM runlane_runs {filters}
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: runs_by_attribute
-- (A fragment: the runs of a listing by attributes.) The runs of the first attribute of the
-- filter (``attribute``, one attribute as a JSON object), by its entries in
-- runlane_attribute_runs: newest first, a walk of the range of its value in their primary key
-- (see migration 0023), from where ``{entry_bounds}`` bound it. Each run is read by id and
-- tested (``{run_filters}``: every attribute of the filter, that one included, on the run's
-- own). The lookup is a lateral subquery the planner cannot flatten (OFFSET 0), so that the
-- walk stays the outer loop and stops at the page's last run: the planner cannot tell how many
-- runs a value has, nor that a run of its entries holds it, and would otherwise join all of
-- them and sort them whenever it guessed a value rare.
runlane_attribute_runs AS a CROSS JOIN LATERAL (
    SELECT * FROM runlane_runs AS r WHERE r.id = a.run_id {run_filters} OFFSET 0
) AS r
WHERE a.entry = jsonb_hash_extended(%(attribute)s::jsonb, 0) {entry_bounds}

-- name: list_runs_by_attributes
-- As ``list_runs``, for a filter on attributes.
SELECT r.* FROM {runs_by_attribute}
ORDER BY a.created_at DESC, a.run_id DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: page_runs_by_attributes
-- As ``page_runs``, for a filter on attributes: from a cursor, the walk starts where it is.
SELECT r.* FROM {runs_by_attribute}
ORDER BY a.created_at DESC, a.run_id DESC
LIMIT %(limit)s;

-- name: count_runs
SELECT status, count(*) AS runs FROM runlane_runs {filters} GROUP BY status;

-- name: count_runs_by_attributes
-- As ``count_runs``, for a filter on attributes: the runs of the first attribute's entries,
-- each read by id (the planner cannot tell how many a value has: a join could be a scan of
-- every run).
SELECT status, count(*) AS runs FROM runlane_runs {filters}
    AND id = ANY(ARRAY(SELECT run_id FROM runlane_attribute_runs
                       WHERE entry = jsonb_hash_extended(%(attribute)s::jsonb, 0)))
GROUP BY status;

-- name: active_run_counts
-- An index walk of the active statuses (runlane_runs_status_newest), never of settled runs; of one
-- namespace's runs, or of every namespace's when %(namespace)s is NULL.
SELECT workflow, status, count(*) AS runs FROM runlane_runs
WHERE status IN {active}
  AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
GROUP BY workflow, status;

-- name: active_code_counts
-- As ``active_run_counts``, by code.
SELECT workflow, version, count(*) AS runs FROM runlane_runs
WHERE status IN {active}
  AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
GROUP BY workflow, version;

-- name: announce_engine
INSERT INTO runlane_engines (
    id, host, pid, namespace, started_at, last_beat_at, lease, serves, groups)
VALUES (%(id)s, %(host)s, %(pid)s, %(namespace)s, %(started_at)s, %(last_beat_at)s, %(lease)s,
        %(serves)s::json, %(groups)s::json)
ON CONFLICT (id) DO UPDATE SET
    host = excluded.host, pid = excluded.pid, namespace = excluded.namespace,
    started_at = excluded.started_at, last_beat_at = excluded.last_beat_at,
    lease = excluded.lease, serves = excluded.serves, groups = excluded.groups;

-- name: beat_engine
UPDATE runlane_engines SET last_beat_at = %(at)s WHERE id = %(id)s RETURNING id;

-- name: remove_engine
DELETE FROM runlane_engines WHERE id = %(id)s;

-- name: list_engines
SELECT * FROM runlane_engines ORDER BY started_at, id;

-- name: prune_engines
DELETE FROM runlane_engines WHERE last_beat_at < %(before)s RETURNING id;

-- name: append_audit
INSERT INTO runlane_audit (at, actor, source, action, outcome, run_id, namespace, detail)
VALUES (%(at)s, %(actor)s, %(source)s, %(action)s, %(outcome)s, %(run_id)s, %(namespace)s,
        %(detail)s)
RETURNING id;

-- name: list_audit
SELECT * FROM runlane_audit
WHERE (%(before)s::bigint IS NULL OR id < %(before)s::bigint)
  AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s::text)
ORDER BY id DESC LIMIT %(limit)s;

-- name: lane_runs
SELECT * FROM runlane_runs
WHERE status IN {active}
  AND (singleton_key IS NOT NULL OR concurrency_key IS NOT NULL)
ORDER BY created_at, id;

-- name: lane_runs_of_key
-- One lane's runs (a stored singleton or quota key): runlane_runs_singleton_active and
-- runlane_runs_quota searched for the key, whatever else is active.
SELECT * FROM runlane_runs
WHERE status IN {active} AND (singleton_key = %(lane)s OR concurrency_key = %(lane)s)
ORDER BY created_at, id;

-- name: lane_members
-- The lanes overview (Store.lane_members; the twin of lanes.members_of): each lane's runs in
-- the order of its index (runlane_runs_singleton_active, so no sort), each run's place among
-- the lane's holders (or waiters) counted by a running count over that order, the lane's
-- totals and its newest run's limit over the whole lane; only the first %(shown)s holders and
-- waiters of each lane leave the server. A quota's holders are the runs it counts (its gate's
-- statuses; every active status without them). With %(key)s, only the lanes whose stored key
-- ends in it (the store keeps those shown by it): one key's lanes, the others neither sorted
-- nor counted.
SELECT kind, name, id, workflow, status, created_at, holds, place, total, lane_limit
FROM (
    SELECT 'singleton' AS kind, singleton_key AS name, id, workflow, status, created_at,
           holds_slot AS holds,
           CASE WHEN holds_slot THEN count(*) FILTER (WHERE holds_slot) OVER upto
                ELSE count(*) FILTER (WHERE NOT holds_slot) OVER upto END AS place,
           CASE WHEN holds_slot THEN count(*) FILTER (WHERE holds_slot) OVER whole
                ELSE count(*) FILTER (WHERE NOT holds_slot) OVER whole END AS total,
           last_value(singleton_limit) OVER whole AS lane_limit
    FROM runlane_runs
    WHERE singleton_key IS NOT NULL AND status IN {active}
      AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
      AND (%(key)s::text IS NULL OR right(singleton_key, length(%(key)s) + 1) = ':' || %(key)s)
    WINDOW upto AS (PARTITION BY singleton_key ORDER BY created_at, id ROWS UNBOUNDED PRECEDING),
           whole AS (PARTITION BY singleton_key ORDER BY created_at, id
                     ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
    UNION ALL
    SELECT 'concurrency', concurrency_key, id, workflow, status, created_at, counted,
           CASE WHEN counted THEN count(*) FILTER (WHERE counted) OVER upto
                ELSE count(*) FILTER (WHERE NOT counted) OVER upto END,
           CASE WHEN counted THEN count(*) FILTER (WHERE counted) OVER whole
                ELSE count(*) FILTER (WHERE NOT counted) OVER whole END,
           last_value(concurrency_limit) OVER whole
    FROM (
        SELECT concurrency_key, id, workflow, status, created_at, concurrency_limit,
               (concurrency_limit IS NULL OR coalesce(cardinality(concurrency_statuses), 0) = 0
                OR status = ANY(concurrency_statuses)) AS counted
        FROM runlane_runs
        WHERE concurrency_key IS NOT NULL AND status IN {active}
          AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
          AND (%(key)s::text IS NULL OR concurrency_key = %(key)s
               OR right(concurrency_key, length(%(key)s) + 1) = ':' || %(key)s)
    ) AS quota
    WINDOW upto AS (PARTITION BY concurrency_key ORDER BY created_at, id ROWS UNBOUNDED PRECEDING),
           whole AS (PARTITION BY concurrency_key ORDER BY created_at, id
                     ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
) AS members
WHERE place <= %(shown)s;

-- name: limited_runs
-- The starts still inside their rate windows and the debounced runs not begun yet: two ranges
-- of runlane_runs_rate_window and runlane_runs_debounce.
SELECT * FROM runlane_runs WHERE rate_until > %(now)s
UNION ALL
SELECT * FROM runlane_runs
WHERE debounce_key IS NOT NULL AND status = 'blocked' AND begin_at > %(now)s
  AND (rate_until IS NULL OR rate_until <= %(now)s)
ORDER BY created_at, id;

-- name: prune_runs
-- Retention: at most %(limit)s settled runs, least recently settled first, among those of
-- each given status settled before its cutoff (one walk of runlane_runs_settled per status)
-- whose children have all settled. A run an engine before schema version 16 settled has no
-- settled_at: its updated_at is when (the second walk, of the index's NULLs: only runs
-- settled during an upgrade). The rows are locked and re-read before the delete: a run locked
-- by a turn is skipped, and one that changed since (a requeue) is kept. Step records, signals
-- and queue entries go with their run (ON DELETE CASCADE), the entries of its attributes with
-- the statement (``unindexed``).
WITH due AS (
    SELECT d.id, d.status, d.updated_at, d.settled_at
    FROM unnest(%(statuses)s::text[], %(cutoffs)s::timestamptz[]) AS c (status, before)
    CROSS JOIN LATERAL (
        (SELECT r.id, r.status, r.updated_at, r.settled_at FROM runlane_runs AS r
         WHERE r.status IN {terminal}
           AND r.status = c.status AND r.settled_at < c.before
           AND NOT EXISTS ({active_children})
         ORDER BY r.settled_at
         LIMIT %(limit)s)
        UNION ALL
        (SELECT r.id, r.status, r.updated_at, r.updated_at FROM runlane_runs AS r
         WHERE r.status IN {terminal}
           AND r.status = c.status AND r.settled_at IS NULL AND r.updated_at < c.before
           AND NOT EXISTS ({active_children})
         ORDER BY r.updated_at
         LIMIT %(limit)s)
    ) AS d
    ORDER BY d.settled_at, d.id
    LIMIT %(limit)s
), doomed AS (
    SELECT r.id, r.created_at, r.attributes FROM runlane_runs AS r
    JOIN due ON due.id = r.id AND due.status = r.status AND due.updated_at = r.updated_at
    FOR UPDATE OF r SKIP LOCKED
), unindexed AS (
    -- Each run's entries by their whole key, its hashes computed once (as in set_attributes).
    DELETE FROM runlane_attribute_runs AS a
    USING (SELECT d.*, ARRAY(SELECT {entry} FROM jsonb_each(d.attributes) AS e) AS entries
           FROM doomed AS d) AS d
    WHERE a.entry = ANY(d.entries) AND a.created_at = d.created_at AND a.run_id = d.id
)
DELETE FROM runlane_runs AS r USING doomed WHERE r.id = doomed.id
RETURNING r.id;

-- name: active_children
-- (A fragment.) The unsettled children of the run ``r``.
SELECT 1 FROM runlane_runs AS k
WHERE k.parent_id = r.id AND k.status IN {active}

-- name: prune_events
-- Retention of the event log: at most %(limit)s events published before %(before)s, lowest seq
-- first (a walk of the primary key), the newest event kept (it carries latest_event_seq), and
-- every event a pending wait may still read kept too (runlane_steps_waiting).
DELETE FROM runlane_events AS e
USING (
    SELECT seq FROM runlane_events
    WHERE created_at < %(before)s AND seq < (SELECT max(seq) FROM runlane_events)
      AND seq <= coalesce((
          SELECT min((s.input->>'after')::bigint) FROM runlane_steps AS s
          JOIN runlane_runs AS r ON r.id = s.run_id
            AND r.status IN {active}
          WHERE s.kind = 'event' AND s.status = 'pending'), seq)
    ORDER BY seq
    LIMIT %(limit)s
) AS doomed
WHERE e.seq = doomed.seq
RETURNING e.seq;

-- name: queue_rows
SELECT * FROM runlane_queues;

-- name: queue_live_entries
-- The entries of unsettled runs, by arrival (a settled run's may linger until it is pruned).
SELECT e.* FROM runlane_queue_entries AS e
JOIN runlane_runs AS r ON r.id = e.run_id
    AND r.status IN {active}
ORDER BY e.id;

-- name: queue_keys
SELECT queue, fairness_key, served FROM runlane_queue_keys;

-- name: reset
-- Every runlane table emptied, its sequences restarted (tests share one database for a
-- session). DELETE, not TRUNCATE: on a test's few rows TRUNCATE's new files and their fsync
-- took 75 ms, this statement under 1 ms.
WITH signals AS (DELETE FROM runlane_signals), steps AS (DELETE FROM runlane_steps),
    events AS (DELETE FROM runlane_events), runs AS (DELETE FROM runlane_runs),
    schedules AS (DELETE FROM runlane_schedules), queues AS (DELETE FROM runlane_queues),
    entries AS (DELETE FROM runlane_queue_entries), keys AS (DELETE FROM runlane_queue_keys),
    engines AS (DELETE FROM runlane_engines), audit AS (DELETE FROM runlane_audit),
    attributes AS (DELETE FROM runlane_attribute_runs)
SELECT setval(pg_get_serial_sequence('runlane_signals', 'id'), 1, false),
    setval(pg_get_serial_sequence('runlane_events', 'seq'), 1, false),
    setval(pg_get_serial_sequence('runlane_queue_entries', 'id'), 1, false),
    setval(pg_get_serial_sequence('runlane_audit', 'id'), 1, false);

-- name: save_schedule
-- A schedule's definition, pause flag and timing; an existing one keeps its creation time and
-- its last fire.
INSERT INTO runlane_schedules (
    id, definition, paused, next_window_at, next_fire_at, created_at, updated_at)
VALUES (%(id)s, %(definition)s::json, %(paused)s, %(next_window_at)s, %(next_fire_at)s,
        %(created_at)s, %(updated_at)s)
ON CONFLICT (id) DO UPDATE SET
    definition = EXCLUDED.definition, paused = EXCLUDED.paused,
    next_window_at = EXCLUDED.next_window_at, next_fire_at = EXCLUDED.next_fire_at,
    updated_at = EXCLUDED.updated_at
RETURNING *;

-- name: get_schedule
SELECT * FROM runlane_schedules WHERE id = %(id)s;

-- name: list_schedules
SELECT * FROM runlane_schedules ORDER BY id;

-- name: delete_schedule
DELETE FROM runlane_schedules WHERE id = %(id)s RETURNING id;

-- name: due_schedules
-- ``workflows``: the schedules of those workflows only (NULL: every one).
SELECT * FROM runlane_schedules
WHERE NOT paused AND next_fire_at <= %(now)s
  AND (%(workflows)s::text[] IS NULL OR definition ->> 'workflow' = ANY(%(workflows)s::text[]))
ORDER BY next_fire_at, id
LIMIT %(limit)s;

-- name: advance_schedule
-- The compare-and-set of a fire: the row moves on only while it still awaits that window.
UPDATE runlane_schedules
SET next_window_at = %(next_window)s, next_fire_at = %(next_fire)s, last_fire_at = %(now)s,
    updated_at = %(now)s
WHERE id = %(id)s AND NOT paused AND next_window_at = %(expected)s
RETURNING id;

-- name: record_schedule_fire
UPDATE runlane_schedules SET last_run_id = %(run_id)s, last_error = %(error)s::json
WHERE id = %(id)s;

-- name: schedule_moves
-- (A fragment.) The compare-and-set of many schedules' fires (``fires``, one JSON array of
-- objects; ``schedule_ids``, their ids, so the rows are found by their key, not in a walk of
-- every schedule's due index): each row locked in id order (two engines firing overlapping
-- batches wait for each other, never deadlock), then moved on only while it still awaits the
-- expected window. A
-- fire with a run records it as the last one, as an ungated run's fire does (a gated fire's
-- outcome is recorded after its start, by ``record_schedule_fires``).
fires AS (
    SELECT * FROM json_to_recordset(%(fires)s::json) AS f (
        schedule_id text, expected timestamptz, next_window timestamptz,
        next_fire timestamptz, run_id text)
), locked AS MATERIALIZED (
    SELECT s.id FROM runlane_schedules AS s JOIN fires AS f ON f.schedule_id = s.id
    WHERE s.id = ANY(%(schedule_ids)s::text[]) AND NOT s.paused AND s.next_window_at = f.expected
    ORDER BY s.id
    FOR UPDATE OF s
), moved AS (
    UPDATE runlane_schedules AS s
    SET next_window_at = f.next_window, next_fire_at = f.next_fire, last_fire_at = %(now)s,
        updated_at = %(now)s, last_run_id = coalesce(f.run_id, s.last_run_id),
        last_error = CASE WHEN f.run_id IS NULL THEN s.last_error END
    FROM fires AS f
    WHERE s.id = f.schedule_id AND s.id IN (SELECT id FROM locked)
    RETURNING s.id AS schedule_id, f.run_id
)

-- name: fire_windows
-- Schedules' fires whose runs are ungated, in one statement: the compare-and-sets, then the
-- window runs of the schedules that moved (an existing id is left alone, and read by the
-- caller). The ids of the runs created (the caller has their specs), then one row of the
-- schedules that moved (``moved``): no join of the two, which a generic plan would make a
-- nested loop over both.
WITH {schedule_moves}, given AS (
    SELECT g.*, false AS claimed, NULL::timestamptz AS waits_until, {unlimited} FROM ({spec_rows}) AS g
    WHERE g.id IN (SELECT run_id FROM moved)
), inserted AS ({insert_given}), {index_inserted}
SELECT id, NULL::text[] AS moved FROM inserted
UNION ALL
SELECT NULL, ARRAY(SELECT schedule_id FROM moved);

-- name: advance_schedules
-- The compare-and-sets alone (a batch with gated runs: the caller starts them after).
WITH {schedule_moves}
SELECT schedule_id FROM moved;

-- name: record_schedule_fires
-- What the gated starts of a batch did: each schedule's last run and refusal.
UPDATE runlane_schedules AS s SET last_run_id = r.run_id, last_error = r.error
FROM json_to_recordset(%(records)s::json) AS r (id text, run_id text, error json)
WHERE s.id = r.id;

-- name: queue_window
-- (A fragment.) The start of the fixed rate window ``now`` falls in (aligned on the epoch), for
-- a queue row ``q`` with a rate limit; NULL without one.
CASE WHEN q.rate_limit IS NULL THEN NULL ELSE to_timestamp(
    floor(extract(epoch FROM %(now)s::timestamptz) / q.rate_period) * q.rate_period) END

-- name: queue_order
-- (A fragment.) The order of a queue's waiters ``w`` (``k`` their fairness key's row): higher
-- priority, then the key served least recently (never served first), then arrival.
w.priority DESC,
CASE WHEN q.fairness = 'key' THEN coalesce(k.served, -1) ELSE 0 END,
CASE WHEN q.arrival = 'lifo' THEN -w.id ELSE w.id END

-- name: register_queue
INSERT INTO runlane_queues (name, concurrency, rate_limit, rate_period, fairness, arrival,
                            updated_at)
VALUES (%(name)s, %(concurrency)s, %(rate_limit)s, %(rate_period)s, %(fairness)s, %(arrival)s,
        %(now)s)
ON CONFLICT (name) DO UPDATE SET
    concurrency = EXCLUDED.concurrency, rate_limit = EXCLUDED.rate_limit,
    rate_period = EXCLUDED.rate_period, fairness = EXCLUDED.fairness,
    arrival = EXCLUDED.arrival, updated_at = EXCLUDED.updated_at;

-- name: lock_queues_for
-- The row locks of an admission's queue and of the queues of the entries it releases, in name
-- order, taken before any run's row (the lock order: singleton keys, then queues, then runs):
-- the admissions of a queue are decided one at a time, and never deadlock with each other over
-- the runs they wake. Releases take no queue lock (see ``release_steps``).
SELECT name FROM runlane_queues
WHERE name = %(queue)s
   OR name IN (SELECT queue FROM runlane_queue_entries
               WHERE run_id = %(id)s AND seq = ANY(%(release)s::int[]))
ORDER BY name
FOR NO KEY UPDATE;

-- name: lock_queues_of
-- The row locks of the queues a run's entries are in (at ``seqs``, or all), in name order: a
-- recovery (which re-decides the run's slots) and a worker's result take them first.
SELECT name FROM runlane_queues
WHERE name IN (SELECT queue FROM runlane_queue_entries
               WHERE run_id = %(id)s AND (%(seqs)s::int[] IS NULL OR seq = ANY(%(seqs)s::int[])))
ORDER BY name
FOR NO KEY UPDATE;

-- name: queue_enter
-- After the queue's lock and the turn's fenced flush (earlier statements of the transaction):
-- while the caller still holds the lease, mark the run queued and give the step an entry if it
-- has none. ``known`` is false for a queue nobody registered.
WITH q AS (
    SELECT name FROM runlane_queues WHERE name = %(queue)s
), held AS (
    SELECT id FROM runlane_runs
    WHERE id = %(id)s AND lease_owner = %(owner)s AND status = 'running'
), marked AS (
    UPDATE runlane_runs SET queued = true
    WHERE id IN (SELECT id FROM held) AND NOT queued AND EXISTS (SELECT FROM q)
), entered AS (
    INSERT INTO runlane_queue_entries (queue, run_id, seq, priority, fairness_key, created_at)
    SELECT q.name, held.id, %(seq)s, %(priority)s, %(fairness_key)s, %(now)s FROM q, held
    ON CONFLICT (run_id, seq) DO NOTHING
)
SELECT EXISTS (SELECT FROM q) AS known, EXISTS (SELECT FROM held) AS held;

-- name: queue_admit
-- The admission (see ``Store.admit_step``), after ``queue_enter``: the step is admitted when its
-- entry already holds a slot, or is among the first ``free`` waiters of unsettled runs, ``free``
-- being the least of the free slots and what is left of the rate window. Admitted: it holds a
-- slot from now, the window counts it and its fairness key is served last. Denied: one more
-- denial, and the first waiters (who the room is for) are woken.
WITH q AS (
    SELECT q.*, {queue_window} AS win FROM runlane_queues AS q WHERE q.name = %(queue)s
), me AS (
    SELECT e.* FROM runlane_queue_entries AS e
    WHERE e.run_id = %(id)s AND e.seq = %(seq)s AND EXISTS (
        SELECT FROM runlane_runs
        WHERE id = %(id)s AND lease_owner = %(owner)s AND status = 'running')
), room AS (
    SELECT q.name, q.win,
           CASE WHEN q.window_start >= q.win THEN q.window_count ELSE 0 END AS used,
           GREATEST(0, LEAST(
               coalesce(q.concurrency - (
                   SELECT count(*) FROM runlane_queue_entries AS h
                   JOIN runlane_runs AS r ON r.id = h.run_id
                   WHERE h.queue = q.name AND h.admitted_at IS NOT NULL
                     AND r.status IN {active}),
                   4611686018427387904),
               coalesce(q.rate_limit - CASE WHEN q.window_start >= q.win THEN q.window_count
                                            ELSE 0 END,
                        4611686018427387904))) AS free
    FROM q
), first AS (
    SELECT w.id, w.run_id FROM q, runlane_queue_entries AS w
    JOIN runlane_runs AS r ON r.id = w.run_id
    LEFT JOIN runlane_queue_keys AS k ON k.queue = w.queue AND k.fairness_key = w.fairness_key
    WHERE w.queue = q.name AND w.admitted_at IS NULL
      AND r.status IN {active} AND r.status <> 'paused'  -- a paused run waits in no line
    ORDER BY {queue_order}
    LIMIT (SELECT free FROM room)
), decision AS (
    SELECT me.id, me.denials, me.fairness_key, me.admitted_at IS NOT NULL AS again,
           me.admitted_at IS NOT NULL OR me.id IN (SELECT id FROM first) AS admit
    FROM me
), admitted AS (
    UPDATE runlane_queue_entries AS e SET admitted_at = %(now)s
    FROM decision AS d WHERE e.id = d.id AND d.admit AND NOT d.again
    RETURNING e.id
), counted AS (
    UPDATE runlane_queues AS u
    SET window_start = room.win,
        window_count = CASE WHEN room.win IS NULL THEN 0 ELSE room.used + 1 END,
        served = u.served + 1
    FROM room WHERE u.name = room.name AND EXISTS (SELECT FROM admitted)
    RETURNING u.served, u.fairness
), served AS (
    INSERT INTO runlane_queue_keys (queue, fairness_key, served)
    SELECT %(queue)s, d.fairness_key, c.served FROM decision AS d, counted AS c
    WHERE c.fairness = 'key'
    ON CONFLICT (queue, fairness_key) DO UPDATE SET served = EXCLUDED.served
), denied AS (
    UPDATE runlane_queue_entries AS e SET denials = e.denials + 1
    FROM decision AS d WHERE e.id = d.id AND NOT d.admit
), woken AS (
    UPDATE runlane_runs {wake_set}
    WHERE id IN (SELECT run_id FROM first WHERE run_id <> %(id)s)
      AND EXISTS (SELECT FROM decision WHERE NOT admit)
      AND status IN {active}
    RETURNING id
)
SELECT d.admit, d.denials, room.win, room.used, q.rate_limit, q.rate_period,
       ARRAY(SELECT id FROM woken ORDER BY id) AS woken
FROM decision AS d, room, q;

-- name: queue_release
-- Delete the run's entries (at ``seqs``, or all of them with ``seqs`` NULL; with ``lost_turn``,
-- the slots a lost turn held: those holding one, except a remote attempt's still in flight,
-- whose step record is ``running``), with ``owner`` set only while it holds the run's lease, with
-- ``settled`` only once the run is settled (the caller took the queues' locks); then
-- wake the first waiters of their queues the free room is for. The statement's snapshot still
-- shows the deleted entries, hence the ``NOT IN gone`` below.
WITH gone AS (
    DELETE FROM runlane_queue_entries
    WHERE run_id = %(id)s
      AND (%(seqs)s::int[] IS NULL OR seq = ANY(%(seqs)s::int[]))
      AND (NOT %(lost_turn)s OR admitted_at IS NOT NULL AND NOT EXISTS (
          SELECT FROM runlane_steps AS s
          WHERE s.run_id = %(id)s AND s.seq = runlane_queue_entries.seq
            AND s.status = 'running'))
      AND (%(owner)s::text IS NULL OR EXISTS (
          SELECT FROM runlane_runs
          WHERE id = %(id)s AND lease_owner = %(owner)s AND status = 'running'))
      AND (NOT %(settled)s OR EXISTS (
          SELECT FROM runlane_runs
          WHERE id = %(id)s AND status IN {terminal}))
    RETURNING id, queue
), room AS (
    SELECT q.name, q.fairness, q.arrival, GREATEST(0, LEAST(
        coalesce(q.concurrency - (
            SELECT count(*) FROM runlane_queue_entries AS h
            JOIN runlane_runs AS r ON r.id = h.run_id
            WHERE h.queue = q.name AND h.admitted_at IS NOT NULL
              AND h.id NOT IN (SELECT id FROM gone)
              AND r.status IN {active}),
            4611686018427387904),
        coalesce(q.rate_limit - CASE WHEN q.window_start >= {queue_window} THEN q.window_count
                                     ELSE 0 END,
                 4611686018427387904))) AS free
    FROM runlane_queues AS q WHERE q.name IN (SELECT queue FROM gone)
), nexts AS (
    SELECT n.run_id FROM room AS q, LATERAL (
        SELECT w.run_id FROM runlane_queue_entries AS w
        JOIN runlane_runs AS r ON r.id = w.run_id
        LEFT JOIN runlane_queue_keys AS k
          ON k.queue = w.queue AND k.fairness_key = w.fairness_key
        WHERE w.queue = q.name AND w.admitted_at IS NULL AND w.id NOT IN (SELECT id FROM gone)
          AND r.status IN {active} AND r.status <> 'paused'
        ORDER BY {queue_order}
        LIMIT q.free
    ) AS n
), woken AS (
    UPDATE runlane_runs {wake_set}
    WHERE id IN (SELECT run_id FROM nexts)
      AND status IN {active}
    RETURNING id
)
SELECT ARRAY(SELECT id FROM woken WHERE id <> %(id)s ORDER BY id) AS woken;

-- name: latency_bucket
-- (A fragment.) The latency bucket (runlane.activity.LATENCY_BOUNDS) of the seconds `took`.
CASE WHEN took <= 0.1 THEN 0 WHEN took <= 0.5 THEN 1 WHEN took <= 1 THEN 2 WHEN took <= 5 THEN 3
  WHEN took <= 15 THEN 4 WHEN took <= 60 THEN 5 WHEN took <= 300 THEN 6 WHEN took <= 1800 THEN 7
  WHEN took <= 3600 THEN 8 ELSE 9 END

-- name: run_activity
-- Runs created from %(since)s until %(until)s by minute (a range of runlane_runs_newest), and runs settled
-- since then by minute, status and latency bucket (a range of runlane_runs_settled per terminal
-- status); minutes are counted from the epoch. A run settled by an engine older than schema 16
-- has no settled_at and is not counted. Of one namespace's runs, or of every namespace's when
-- %(namespace)s is NULL.
SELECT floor(extract(epoch FROM created_at) / 60)::bigint AS minute, NULL::text AS status,
  NULL::int AS bucket, count(*) AS runs
FROM runlane_runs WHERE created_at >= %(since)s AND created_at < %(until)s
  AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
GROUP BY 1
UNION ALL
SELECT minute, status, {latency_bucket} AS bucket, count(*) AS runs FROM (
  SELECT floor(extract(epoch FROM r.settled_at) / 60)::bigint AS minute, r.status,
    extract(epoch FROM r.settled_at - r.created_at) AS took
  FROM unnest(ARRAY['cancelled', 'completed', 'dead', 'failed']) AS s (status)
  CROSS JOIN LATERAL (
    -- One range of runlane_runs_settled per status; the IN list matches its predicate.
    SELECT r.status, r.settled_at, r.created_at FROM runlane_runs AS r
    WHERE r.status = s.status AND r.status IN {terminal}
      AND r.settled_at >= %(since)s AND r.settled_at < %(until)s
      AND (%(namespace)s::text IS NULL OR r.namespace = %(namespace)s)
  ) AS r
) AS settled GROUP BY 1, 2, 3;
