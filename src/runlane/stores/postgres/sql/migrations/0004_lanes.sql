-- Singleton lanes are per workflow unless declared global; lane tags; what a requeue needs to
-- apply a run's quota again; the backoff of a singleton waiter's retry timer.

-- Lane tags, from the keys as they were stored (a user's key), on every gated run.
UPDATE runlane_runs SET tags = array_append(tags, 'singleton:' || singleton_key)
WHERE singleton_key IS NOT NULL AND NOT ('singleton:' || singleton_key = ANY(tags));
UPDATE runlane_runs SET tags = array_append(tags, 'concurrency:' || concurrency_key)
WHERE concurrency_key IS NOT NULL AND NOT ('concurrency:' || concurrency_key = ANY(tags));

-- singleton_key now names the lane: "<length of workflow>:<workflow>:<key>" for a lane of one
-- workflow (the default scope), "*:<key>" for a global lane. Every singleton run stored so far
-- was admitted per key across workflows; it continues in its own workflow's lane.
UPDATE runlane_runs
SET singleton_key = length(workflow) || ':' || workflow || ':' || singleton_key
WHERE singleton_key IS NOT NULL;

-- The quota a run was admitted under (its limit and counted statuses), so a requeue applies it
-- again. NULL on runs without a quota.
ALTER TABLE runlane_runs ADD COLUMN concurrency_limit integer;
ALTER TABLE runlane_runs ADD COLUMN concurrency_statuses text[];

-- How many admission retries a singleton waiter was denied in a row: its fallback timer backs
-- off by this (the release of a slot wakes it at once regardless).
ALTER TABLE runlane_runs ADD COLUMN admission_retries integer NOT NULL DEFAULT 0;

-- A key's slot holders, counted at every claim of a waiter: by their own index, the cost of a
-- denial does not grow with the number of waiters.
CREATE INDEX runlane_runs_slot_holders ON runlane_runs (singleton_key) WHERE holds_slot;
