-- runlane schema for SQLite, version 3: singleton lanes are per workflow unless declared global;
-- lane tags; what a requeue needs to apply a run's quota again; the backoff of a singleton
-- waiter's retry timer. (PostgreSQL's migration 0004 does the same.)

-- Lane tags, from the keys as they were stored (a user's key), on every gated run.
UPDATE runs SET tags = json_insert(tags, '$[#]', 'singleton:' || singleton_key)
WHERE singleton_key IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM json_each(runs.tags) WHERE value = 'singleton:' || runs.singleton_key);
UPDATE runs SET tags = json_insert(tags, '$[#]', 'concurrency:' || concurrency_key)
WHERE concurrency_key IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM json_each(runs.tags) WHERE value = 'concurrency:' || runs.concurrency_key);

-- singleton_key now names the lane: "<length of workflow>:<workflow>:<key>" for a lane of one
-- workflow (the default scope), "*:<key>" for a global lane.
UPDATE runs SET singleton_key = length(workflow) || ':' || workflow || ':' || singleton_key
WHERE singleton_key IS NOT NULL;

-- The quota a run was admitted under (limit, and counted statuses as a JSON array).
ALTER TABLE runs ADD COLUMN concurrency_limit INTEGER;
ALTER TABLE runs ADD COLUMN concurrency_statuses TEXT;

-- Admission retries a singleton waiter was denied in a row (its fallback timer backs off).
ALTER TABLE runs ADD COLUMN admission_retries INTEGER NOT NULL DEFAULT 0;

-- A key's slot holders, counted at every claim of a waiter (see PostgreSQL's 0004).
CREATE INDEX runs_slot_holders ON runs (singleton_key) WHERE holds_slot;
