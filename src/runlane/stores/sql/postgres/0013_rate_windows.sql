-- runlane schema for PostgreSQL, version 13: what operators' lanes show of run-level rate limits
-- (SQLite's migration 0012 does the same).

-- The limit a rate-limited start was counted under, and the instant it leaves its key's sliding
-- window (its rate_at plus the period). Runs started before this version have neither, and do
-- not show in the lanes; their starts still count in the windows as before.
ALTER TABLE runlane_runs ADD COLUMN rate_limit integer;
ALTER TABLE runlane_runs ADD COLUMN rate_until timestamptz;

-- The lanes read the starts still inside their windows: a range of this index, however many
-- rate-limited runs are kept.
CREATE INDEX runlane_runs_rate_window ON runlane_runs (rate_until) WHERE rate_until IS NOT NULL;
