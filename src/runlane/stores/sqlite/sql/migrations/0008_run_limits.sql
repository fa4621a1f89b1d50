-- runlane schema for SQLite, version 8: run-level rate limits, throttles and debounce
-- (PostgreSQL's migration 0009 does the same).

-- A rate-limited run's key (a lane of its workflow) and the instant its start counts in the
-- key's sliding window (a throttled run's: the instant its window lets it begin).
ALTER TABLE runs ADD COLUMN rate_key TEXT;
ALTER TABLE runs ADD COLUMN rate_at TEXT;
-- A run held by its throttle or its debounce is blocked until this instant, and no singleton
-- waiter until then.
ALTER TABLE runs ADD COLUMN begin_at TEXT;
-- A debounced run's key (a lane of its workflow): starts of it fold into the run until it begins.
ALTER TABLE runs ADD COLUMN debounce_key TEXT;

-- A rate-limited start reads its key's most recent starts, newest first, up to its limit.
CREATE INDEX runs_rate ON runs (rate_key, rate_at DESC) WHERE rate_key IS NOT NULL;
-- A debounced start looks for its key's held run.
CREATE INDEX runs_debounce ON runs (debounce_key, begin_at)
    WHERE debounce_key IS NOT NULL AND status = 'blocked';
