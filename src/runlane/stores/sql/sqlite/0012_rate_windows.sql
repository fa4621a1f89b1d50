-- runlane schema for SQLite, version 12: what operators' lanes show of run-level rate limits
-- (PostgreSQL's migration 0013 does the same).

-- The limit a rate-limited start was counted under, and the instant it leaves its key's sliding
-- window (its rate_at plus the period). Runs started before this version have neither, and do
-- not show in the lanes; their starts still count in the windows as before.
ALTER TABLE runs ADD COLUMN rate_limit INTEGER;
ALTER TABLE runs ADD COLUMN rate_until TEXT;

-- The lanes read the starts still inside their windows: a range of this index, however many
-- rate-limited runs are kept.
CREATE INDEX runs_rate_window ON runs (rate_until) WHERE rate_until IS NOT NULL;
