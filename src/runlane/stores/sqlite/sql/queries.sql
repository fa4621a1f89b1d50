-- SqliteStore's statements, by name (runlane.sqlfiles reads them: ``{name}`` pastes a fragment).
-- Parameters are positional (``?``): each caller passes them in the order they appear here.
-- Timestamps are ISO-8601 UTC text of fixed width, so comparing the text compares the instants.
-- Statements whose shape depends on the call (filters, IN lists of any length, the columns of a
-- whole run row) are assembled in Python, each with a comment saying why.

-- name: active
-- (A fragment.) The statuses of a run that is not finished (models.ACTIVE_STATUSES): a paused
-- run is active (it keeps its slots, it counts against its quota).
('blocked', 'cancelling', 'paused', 'pending', 'running', 'suspended')

-- name: terminal
-- (A fragment.) The statuses of a finished run (models.TERMINAL_STATUSES), in the order of the
-- partial indexes' own condition (SQLite uses such an index only for the same term).
('cancelled', 'completed', 'dead', 'failed')

-- name: leased
-- (A fragment.) The statuses of a run a lease holds.
('cancelling', 'running')

-- name: waiting
-- (A fragment.) The statuses of a run that waits for its wake-up.
('blocked', 'suspended')

-- name: waiters
-- (A fragment.) The statuses of a key's runs that wait their turn for a slot (a cancelling or
-- paused one never does).
('blocked', 'pending', 'running', 'suspended')

-- name: begun
-- (A fragment; one parameter: now.) A run its throttle or debounce no longer holds: only such a
-- run waits for a slot.
(begin_at IS NULL OR begin_at <= ?)

-- name: attribute_value
-- (A fragment.) An attribute's value as attribute_runs keeps it, from a row of json_each: what
-- the JSON parses to (text, integer or real), a boolean as a one-byte blob (see migration 0016).
CASE type WHEN 'true' THEN x'01' WHEN 'false' THEN x'00' ELSE atom END

-- name: runs_by_attribute
-- (A fragment, the FROM of a listing by attributes; two parameters: the first attribute's key,
-- its value as JSON text.) The runs of that attribute, by its rows in attribute_runs: newest
-- first, a walk of its value's range in attribute_runs_newest (migration 0021), from where
-- ``a.created_at`` and ``a.run_id`` bound it (a cursor). CROSS JOIN keeps that walk outermost
-- (SQLite never reorders one): the planner, which cannot tell how many runs hold a value, could
-- otherwise walk a workflow's or a status's runs and look each up. The value is converted as
-- the stored ones were.
attribute_runs AS a CROSS JOIN runs ON runs.id = a.run_id
    AND a.key = ? AND a.value = (SELECT {attribute_value} FROM json_each(?))

-- name: has_attribute
-- (A fragment; two parameters: the key, the value as JSON text.) A run (of the listing's
-- ``runs``) whose attribute ``key`` equals the value: its row in attribute_runs, by primary key.
EXISTS (SELECT 1 FROM attribute_runs AS o
        WHERE o.run_id = runs.id AND o.key = ? AND o.value = (SELECT {attribute_value} FROM json_each(?)))

-- name: index_attributes
-- (Two parameters: attributes as a JSON object, the run's id.) Writes them into attribute_runs
-- with the run's created_at, read from its row (written before), a name the run has already
-- taking the new value.
INSERT OR REPLACE INTO attribute_runs (run_id, key, value, created_at)
SELECT r.id, key, {attribute_value}, r.created_at FROM runs AS r, json_each(?) WHERE r.id = ?

-- ---------------------------------------------------------------- reads

-- name: get_run
SELECT * FROM runs WHERE id = ?

-- name: get_runs
-- One JSON parameter instead of one per id: no limit on how many ids are asked for.
SELECT * FROM runs WHERE id IN (SELECT value FROM json_each(?))

-- name: get_step
SELECT * FROM steps WHERE run_id = ? AND seq = ?

-- name: list_steps
SELECT * FROM steps WHERE run_id = ? ORDER BY seq

-- name: get_reply
-- Parameters: run id, update id.
SELECT * FROM steps
WHERE run_id = ? AND kind = 'reply' AND json_extract(input, '$.update') = ?
ORDER BY seq LIMIT 1

-- name: signals
SELECT * FROM signals WHERE run_id = ? ORDER BY id

-- name: active_run_counts
-- Parameter: the namespace (NULL: every namespace).
SELECT workflow, status, count(*) FROM runs WHERE status IN {active}
  AND (?1 IS NULL OR namespace = ?1)
GROUP BY workflow, status

-- name: active_code_counts
-- Parameter: the namespace (NULL: every namespace).
SELECT workflow, version, count(*) FROM runs WHERE status IN {active}
  AND (?1 IS NULL OR namespace = ?1)
GROUP BY workflow, version

-- ---------------------------------------------------------------- engines

-- name: announce_engine
-- Parameters: id, host, pid, namespace, started_at, last_beat_at, lease, serves, groups.
INSERT OR REPLACE INTO engines (
    id, host, pid, namespace, started_at, last_beat_at, lease, serves, groups)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)

-- name: beat_engine
-- Parameters: at, id.
UPDATE engines SET last_beat_at = ? WHERE id = ?

-- name: remove_engine
DELETE FROM engines WHERE id = ?

-- name: list_engines
SELECT * FROM engines ORDER BY started_at, id

-- name: prune_engines
DELETE FROM engines WHERE last_beat_at < ?

-- name: append_audit
-- Parameters: at, actor, source, action, outcome, run_id, namespace, detail.
INSERT INTO audit (at, actor, source, action, outcome, run_id, namespace, detail)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)

-- name: list_audit
-- Parameters: before (or NULL), namespace (or NULL), limit.
SELECT * FROM audit
WHERE (?1 IS NULL OR id < ?1) AND (?2 IS NULL OR namespace = ?2)
ORDER BY id DESC LIMIT ?3

-- name: lane_runs
SELECT * FROM runs WHERE status IN {active}
  AND (singleton_key IS NOT NULL OR concurrency_key IS NOT NULL)
ORDER BY created_at, id

-- name: lane_runs_of_key
-- One lane's runs (a stored singleton or quota key): runs_singleton_active and
-- runs_concurrency searched for the key. Parameters: the key, the key.
SELECT * FROM runs WHERE singleton_key = ? AND status IN {active}
UNION
SELECT * FROM runs WHERE concurrency_key = ? AND status IN {active}
ORDER BY created_at, id

-- name: lane_members
-- The lanes overview's runs (Store.lane_members; reads.lane_members counts them), the singleton
-- lanes': each lane's active runs, by lane and oldest first, read from runs_singleton_active
-- alone (it covers them: no table lookup, and its order is the result's, so no sort); ``holds``
-- says the run holds a slot. Counting them in SQL (window functions, as PostgreSQL does) took
-- SQLite 26 ms for 10,000 runs, counting the rows in Python 11. Parameters: the namespace
-- (NULL: every one); a key (NULL: every one), keeping the lanes whose stored key ends in it
-- (reads.lane_members keeps those shown by it).
SELECT 'singleton' AS kind, singleton_key AS name, id, workflow, status, created_at,
       holds_slot AS holds, singleton_limit AS lane_limit
FROM runs INDEXED BY runs_singleton_active
WHERE singleton_key IS NOT NULL AND status IN {active} AND (?1 IS NULL OR namespace = ?1)
  AND (?2 IS NULL OR substr(singleton_key, -(length(?2) + 1)) = ':' || ?2)
ORDER BY singleton_key, created_at, id

-- name: lane_members_of_quotas
-- lane_members' twin for the quota keys: ``holds`` says the quota counts the run (its gate's
-- statuses; every active status without them). A statement of its own: a UNION ALL of the two
-- was sorted whole in a temporary B-tree. Parameters as lane_members'.
SELECT 'concurrency' AS kind, concurrency_key AS name, id, workflow, status, created_at,
       (concurrency_limit IS NULL OR coalesce(json_array_length(concurrency_statuses), 0) = 0
        OR status IN (SELECT value FROM json_each(concurrency_statuses))) AS holds,
       concurrency_limit AS lane_limit
FROM runs INDEXED BY runs_concurrency
WHERE concurrency_key IS NOT NULL AND status IN {active} AND (?1 IS NULL OR namespace = ?1)
  AND (?2 IS NULL OR concurrency_key = ?2 OR substr(concurrency_key, -(length(?2) + 1)) = ':' || ?2)
ORDER BY concurrency_key, created_at, id

-- name: limited_runs
-- Parameters: now, now, now. Two index ranges (runs_rate_window, runs_debounce), not a scan of
-- the rate-limited runs. The indexes are named: with the statistics of a million runs, SQLite
-- chose to walk runs_newest in the order of the result instead (160 ms).
SELECT * FROM runs INDEXED BY runs_rate_window WHERE rate_until IS NOT NULL AND rate_until > ?
UNION ALL
SELECT * FROM runs INDEXED BY runs_debounce WHERE debounce_key IS NOT NULL AND status = 'blocked'
  AND begin_at > ? AND (rate_until IS NULL OR rate_until <= ?)
ORDER BY created_at, id

-- name: events_after
SELECT * FROM events WHERE name = ? AND seq > ? ORDER BY seq LIMIT ?

-- name: event_since
SELECT 1 FROM events WHERE name = ? AND seq > ? LIMIT 1

-- name: latest_event_seq
SELECT COALESCE(MAX(seq), 0) FROM events

-- name: get_event
SELECT * FROM events WHERE id = ?

-- ---------------------------------------------------------------- claim queues
-- Each in two forms: every namespace, or one (``_in``: the namespace before the limit). One
-- statement with ``(? IS NULL OR namespace = ?)`` would plan one way for both.

-- name: pending_ids
SELECT id FROM runs WHERE status = 'pending'
ORDER BY priority DESC, created_at, id LIMIT ?

-- name: pending_ids_in
SELECT id FROM runs WHERE status = 'pending' AND namespace = ?
ORDER BY priority DESC, created_at, id LIMIT ?

-- name: due_ids
SELECT id FROM runs WHERE status IN {waiting} AND wake_at <= ?
ORDER BY wake_at, id LIMIT ?

-- name: due_ids_in
SELECT id FROM runs WHERE status IN {waiting} AND wake_at <= ? AND namespace = ?
ORDER BY wake_at, id LIMIT ?

-- name: expired_ids
SELECT id FROM runs WHERE status IN {leased} AND lease_expires_at <= ?
ORDER BY lease_expires_at, id LIMIT ?

-- name: expired_ids_in
SELECT id FROM runs WHERE status IN {leased} AND lease_expires_at <= ? AND namespace = ?
ORDER BY lease_expires_at, id LIMIT ?

-- name: timed_out_ids
SELECT id FROM runs WHERE status IN {active} AND deadline_at <= ?
ORDER BY deadline_at, id LIMIT ?

-- name: timed_out_ids_in
SELECT id FROM runs WHERE status IN {active} AND deadline_at <= ? AND namespace = ?
ORDER BY deadline_at, id LIMIT ?

-- The same queues for an engine that serves only some codes: each served (workflow, version)
-- walks its own index entries (runs_*_code, the code leading) in claim order up to the limit,
-- and the few rows found are ordered once more. Runs of other codes are never read.
-- Parameters: codes (a JSON array of [workflow, version] pairs), then the queue's own (now,
-- when it has one), namespace (NULL: every namespace), limit.

-- name: pending_ids_served
SELECT r.id FROM json_each(?1) AS c JOIN runs AS r ON r.rowid IN (
    SELECT p.rowid FROM runs AS p
    WHERE p.status = 'pending' AND p.workflow = json_extract(c.value, '$[0]')
      AND p.version = json_extract(c.value, '$[1]') AND (?2 IS NULL OR p.namespace = ?2)
    ORDER BY p.priority DESC, p.created_at, p.id LIMIT ?3)
ORDER BY r.priority DESC, r.created_at, r.id LIMIT ?3

-- name: due_ids_served
SELECT r.id FROM json_each(?1) AS c JOIN runs AS r ON r.rowid IN (
    SELECT p.rowid FROM runs AS p
    WHERE p.status IN {waiting} AND p.workflow = json_extract(c.value, '$[0]')
      AND p.version = json_extract(c.value, '$[1]') AND p.wake_at <= ?2
      AND (?3 IS NULL OR p.namespace = ?3)
    ORDER BY p.wake_at, p.id LIMIT ?4)
ORDER BY r.wake_at, r.id LIMIT ?4

-- name: expired_ids_served
SELECT r.id FROM json_each(?1) AS c JOIN runs AS r ON r.rowid IN (
    SELECT p.rowid FROM runs AS p
    WHERE p.status IN {leased} AND p.workflow = json_extract(c.value, '$[0]')
      AND p.version = json_extract(c.value, '$[1]') AND p.lease_expires_at <= ?2
      AND (?3 IS NULL OR p.namespace = ?3)
    ORDER BY p.lease_expires_at, p.id LIMIT ?4)
ORDER BY r.lease_expires_at, r.id LIMIT ?4

-- name: timed_out_ids_served
SELECT r.id FROM json_each(?1) AS c JOIN runs AS r ON r.rowid IN (
    SELECT p.rowid FROM runs AS p
    WHERE p.deadline_at IS NOT NULL AND p.status IN {active}
      AND p.workflow = json_extract(c.value, '$[0]')
      AND p.version = json_extract(c.value, '$[1]') AND p.deadline_at <= ?2
      AND (?3 IS NULL OR p.namespace = ?3)
    ORDER BY p.deadline_at, p.id LIMIT ?4)
ORDER BY r.deadline_at, r.id LIMIT ?4

-- ---------------------------------------------------------------- starts and admission

-- name: held_of_key
-- The held run of a debounce key a start folds into. Parameters: key, now.
SELECT * FROM runs WHERE debounce_key = ? AND status = 'blocked' AND begin_at > ?
ORDER BY begin_at DESC, id DESC LIMIT 1

-- name: rate_last
-- The limit-th most recent instant a rate key counted a start at. Parameters: key, limit - 1.
SELECT rate_at FROM runs WHERE rate_key = ? ORDER BY rate_at DESC LIMIT 1 OFFSET ?

-- name: active_ids_of_key
SELECT id FROM runs WHERE singleton_key = ? AND status IN {active} ORDER BY created_at, id

-- name: claimable
-- A handed-off timer claims a waiting run whatever its wake time (the hand-off pushed it a lease
-- ahead), but never before a held run's begin_at: a stale or replayed copy must not begin a
-- debounced or throttled run early.
-- Parameters: id, handoff (0 or 1), now, now, now.
SELECT * FROM runs WHERE id = ? AND (status = 'pending'
  OR (status IN {waiting} AND ((? AND (begin_at IS NULL OR begin_at <= ?)) OR wake_at <= ?))
  OR (status IN {leased} AND lease_expires_at <= ?))

-- name: rearm_held
-- A held run a hand-off came too early for (by the claimer's clock): the hand-off pushed its
-- wake time a lease ahead, so it is made due at its begin_at again, not a lease late.
-- Parameters: id, now.
UPDATE runs SET wake_at = begin_at
WHERE id = ? AND status IN {waiting} AND begin_at > ? AND wake_at > begin_at

-- name: slot_holders
-- A key's slot holders, counted by their own index.
SELECT COUNT(*) FROM runs WHERE singleton_key = ? AND holds_slot

-- name: admission_counts
-- A waiter's admission in one statement: its key's slot holders, and the waiters ahead of it
-- counted only up to the free slots (none when the slots are full), so a denial costs the same
-- however many wait. Parameters: key, key, now, the run's created_at, its id, its limit, key.
SELECT (SELECT COUNT(*) FROM runs WHERE singleton_key = ? AND holds_slot) AS holders,
  (SELECT COUNT(*) FROM (
    SELECT 1 FROM runs WHERE singleton_key = ? AND NOT holds_slot
      AND status IN {waiters} AND {begun} AND (created_at, id) < (?, ?)
    ORDER BY created_at, id
    LIMIT max(? - (SELECT COUNT(*) FROM runs WHERE singleton_key = ? AND holds_slot), 0))
  ) AS ahead

-- name: renew_lease
-- Parameters: lease_until, id, owner.
UPDATE runs SET lease_expires_at = ?
WHERE id = ? AND lease_owner = ? AND status IN {leased}

-- ---------------------------------------------------------------- steps and signals

-- name: record_heartbeat
-- Parameters: at, run id, seq, the running status, attempt, the beat's fence (twice). A beat
-- of an older fence than the record's is a stale execution's (models.older_fence).
UPDATE steps SET last_heartbeat_at = ?
WHERE run_id = ? AND seq = ? AND status = ? AND attempts = ?
  AND (? IS NULL OR fence IS NULL OR fence <= ?)
  AND EXISTS (SELECT 1 FROM runs WHERE id = steps.run_id AND status IN {active})

-- name: touch_run
UPDATE runs SET updated_at = ? WHERE id = ?

-- name: fence_and_touch
-- A checkpoint's fence and its touch of the run, one statement: no row when the caller's
-- lease no longer holds the run; the status tells a cancelled one, ``pause_requested_at`` one
-- asked to pause. Parameters: now, id, owner.
UPDATE runs SET updated_at = ? WHERE id = ? AND lease_owner = ? AND status IN {leased}
RETURNING status, pause_requested_at

-- name: delete_signals
DELETE FROM signals WHERE run_id = ?

-- name: insert_signal
INSERT INTO signals (run_id, name, payload, created_at) VALUES (?, ?, ?, ?)

-- name: waits_for
-- Parameters: run id, step kind, name, the pending status.
SELECT 1 FROM steps WHERE run_id = ? AND kind = ? AND name = ? AND status = ?

-- name: ids_waiting_for
-- Parameters: step kind, name, the pending status.
SELECT DISTINCT runs.id FROM steps JOIN runs ON runs.id = steps.run_id
WHERE steps.kind = ? AND steps.name = ? AND steps.status = ?
ORDER BY runs.created_at, runs.id

-- name: delete_unfinished_steps
-- Parameters: run id, the completed status.
DELETE FROM steps WHERE run_id = ? AND status != ?

-- name: insert_event
INSERT INTO events (id, name, payload, created_at) VALUES (?, ?, ?, ?)

-- ---------------------------------------------------------------- settlement and wake-ups

-- name: next_waiters
-- The waiters a release admits, oldest first: as many as the key's active holders leave free
-- slots. Parameters: key, now, the limit, key. ({active} restates runs_singleton_active's own
-- condition, which SQLite needs word for word to search that index.)
SELECT id FROM runs WHERE singleton_key = ? AND status IN {active} AND status IN {waiters}
  AND NOT holds_slot AND {begun}
ORDER BY created_at, id
LIMIT max(? - (SELECT COUNT(*) FROM runs
               WHERE singleton_key = ? AND status IN {active} AND holds_slot), 0)

-- name: stamp_handoff
-- Parameters: now, the woken ids as one JSON array.
UPDATE runs SET handoff_at = ? WHERE id IN (SELECT value FROM json_each(?))

-- name: request_wake
UPDATE runs SET wake_requested_at = ? WHERE id = ?

-- name: wake_waiting
-- Parameters: now, now, id.
UPDATE runs SET wake_at = ?, updated_at = ? WHERE id = ? AND status IN {waiting}

-- name: request_wake_of_leased
UPDATE runs SET wake_requested_at = ? WHERE id = ? AND status IN {leased}

-- name: descendant_ids
-- The descendants a cancellation reaches: a detached child (and its own) is left out.
WITH RECURSIVE tree(id) AS (
  SELECT id FROM runs WHERE parent_id = ? AND NOT detached
  UNION SELECT runs.id FROM runs JOIN tree ON runs.parent_id = tree.id WHERE NOT runs.detached)
SELECT id FROM tree

-- ---------------------------------------------------------------- step queues

-- name: live_entries
-- (A fragment.) Joins a queue entry (``e``) to its run while the run is not finished.
JOIN runs AS r ON r.id = e.run_id AND r.status IN {active}

-- name: register_queue
-- Parameters: name, concurrency, rate_limit, rate_period, fairness, arrival, now.
INSERT INTO step_queues (name, concurrency, rate_limit, rate_period, fairness, arrival, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency,
  rate_limit = excluded.rate_limit, rate_period = excluded.rate_period,
  fairness = excluded.fairness, arrival = excluded.arrival, updated_at = excluded.updated_at

-- name: all_queues
SELECT * FROM step_queues

-- name: live_queue_entries
SELECT e.* FROM queue_entries AS e {live_entries} ORDER BY e.id

-- name: queue_keys
SELECT queue, fairness_key, served FROM queue_keys

-- name: get_queue
SELECT * FROM step_queues WHERE name = ?

-- name: get_queue_entry
SELECT * FROM queue_entries WHERE run_id = ? AND seq = ?

-- name: add_queue_entry
INSERT INTO queue_entries (queue, run_id, seq, priority, fairness_key, created_at)
VALUES (?, ?, ?, ?, ?, ?) RETURNING *

-- name: queue_holders
SELECT COUNT(*) FROM queue_entries AS e {live_entries}
WHERE e.queue = ? AND e.admitted_at IS NOT NULL

-- name: admit_queue_entry
UPDATE queue_entries SET admitted_at = ? WHERE id = ?

-- name: save_queue_window
-- Parameters: window_start, window_count, served, name.
UPDATE step_queues SET window_start = ?, window_count = ?, served = ? WHERE name = ?

-- name: save_queue_key
INSERT INTO queue_keys (queue, fairness_key, served) VALUES (?, ?, ?)
ON CONFLICT (queue, fairness_key) DO UPDATE SET served = excluded.served

-- name: deny_queue_entry
UPDATE queue_entries SET denials = denials + 1 WHERE id = ?

-- name: mark_queued
UPDATE runs SET queued = 1 WHERE id = ? AND NOT queued

-- name: drop_queue_entries
-- Parameters: run id, 1 or NULL (NULL: every seq), the seqs as one JSON array, lost turn (0 or
-- 1: only the slots a lost turn held, a remote attempt's still in flight aside).
DELETE FROM queue_entries WHERE run_id = ?1
  AND (?2 IS NULL OR seq IN (SELECT value FROM json_each(?3)))
  AND (NOT ?4 OR admitted_at IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM steps AS s
      WHERE s.run_id = ?1 AND s.seq = queue_entries.seq AND s.status = 'running'))
RETURNING queue

-- ---------------------------------------------------------------- schedules

-- name: get_schedule
SELECT * FROM schedules WHERE id = ?

-- name: list_schedules
SELECT * FROM schedules ORDER BY id

-- name: due_schedules
-- Parameters: now, workflows (a JSON array of names, or NULL: every workflow), limit.
SELECT * FROM schedules WHERE NOT paused AND next_fire_at <= ?1
  AND (?2 IS NULL OR json_extract(definition, '$.workflow') IN (SELECT value FROM json_each(?2)))
ORDER BY next_fire_at, id LIMIT ?3

-- name: save_schedule
-- Parameters: id, definition, paused, next_window_at, next_fire_at, created_at, updated_at.
INSERT INTO schedules (id, definition, paused, next_window_at, next_fire_at, created_at,
  updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET definition = excluded.definition, paused = excluded.paused,
  next_window_at = excluded.next_window_at, next_fire_at = excluded.next_fire_at,
  updated_at = excluded.updated_at

-- name: delete_schedule
DELETE FROM schedules WHERE id = ?

-- name: move_schedule
-- A fire moves the schedule on only from the window it expected.
-- Parameters: next_window_at, next_fire_at, now, now, id, the expected window.
UPDATE schedules SET next_window_at = ?, next_fire_at = ?, last_fire_at = ?, updated_at = ?
WHERE id = ? AND NOT paused AND next_window_at = ?

-- name: record_schedule_fire
UPDATE schedules SET last_run_id = ?, last_error = ? WHERE id = ?

-- name: schedule_windows
-- The unpaused schedules of a JSON array of ids, with the window each waits for.
SELECT id, next_window_at FROM schedules
WHERE NOT paused AND id IN (SELECT value FROM json_each(?))

-- name: move_schedule_plainly
-- Parameters: next_window_at, next_fire_at, now, now, run id, run id, schedule id.
UPDATE schedules SET next_window_at = ?, next_fire_at = ?, last_fire_at = ?, updated_at = ?,
  last_run_id = coalesce(?, last_run_id),
  last_error = CASE WHEN ? IS NULL THEN last_error END
WHERE id = ?

-- ---------------------------------------------------------------- retention

-- name: prune_events
-- A walk of the primary key from the oldest seq; the newest event stays (it carries
-- latest_event_seq), and so does every event a pending wait may still read (steps_waiting).
-- Parameters: before, limit.
DELETE FROM events WHERE seq IN (
  SELECT seq FROM events WHERE created_at < ?
    AND seq < (SELECT MAX(seq) FROM events)
    AND seq <= coalesce((
      SELECT MIN(json_extract(s.input, '$.after')) FROM steps AS s
      JOIN runs AS r ON r.id = s.run_id AND r.status IN {active}
      WHERE s.kind = 'event' AND s.status = 'pending'), seq)
  ORDER BY seq LIMIT ?)

-- name: latency_bucket
-- (A fragment.) The latency bucket (runlane.activity.LATENCY_BOUNDS) of the seconds `took`.
CASE WHEN took <= 0.1 THEN 0 WHEN took <= 0.5 THEN 1 WHEN took <= 1 THEN 2 WHEN took <= 5 THEN 3
  WHEN took <= 15 THEN 4 WHEN took <= 60 THEN 5 WHEN took <= 300 THEN 6 WHEN took <= 1800 THEN 7
  WHEN took <= 3600 THEN 8 ELSE 9 END

-- name: created_activity
-- Runs created from ?1 until ?2, by minute (seconds since the epoch / 60): a range of runs_newest.
-- ?3: the namespace (NULL: every namespace).
SELECT CAST(strftime('%s', created_at) AS INTEGER) / 60 AS minute, count(*) AS runs
FROM runs WHERE created_at >= ?1 AND created_at < ?2 AND (?3 IS NULL OR namespace = ?3)
GROUP BY minute

-- name: settled_activity
-- Runs settled from ?1 until ?2, by minute, status and latency bucket: a range of runs_terminal per
-- terminal status (a settled run is never written again, so its updated_at is its settlement's).
-- ?3: the namespace (NULL: every namespace).
SELECT minute, status, {latency_bucket} AS bucket, count(*) AS runs FROM (
  SELECT CAST(strftime('%s', updated_at) AS INTEGER) / 60 AS minute, status,
    (julianday(updated_at) - julianday(created_at)) * 86400.0 AS took
  FROM runs WHERE status IN {terminal}
    AND updated_at >= ?1 AND updated_at < ?2 AND (?3 IS NULL OR namespace = ?3)
) GROUP BY minute, status, bucket
