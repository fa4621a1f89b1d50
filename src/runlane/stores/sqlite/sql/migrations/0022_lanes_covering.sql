-- runlane schema for SQLite: the lanes overview reads the active singleton runs from their
-- index alone.
--
-- runs_singleton_active held a key's active runs in lane order, and the overview looked each
-- one up in the table for its workflow, status, slot and limit: at 10,000 active runs that was
-- 18 of the statement's 21 ms. The index now carries those columns (and the namespace the
-- overview filters on) after the same leading ones, so every search of a lane is as before and
-- the overview is one walk of the index (13 ms). A run's status and slot already changed this
-- index's entry (its status is in the index's condition, and a slot is taken with a status
-- change), so the wider entry adds no index write.
DROP INDEX runs_singleton_active;
CREATE INDEX runs_singleton_active
    ON runs (singleton_key, created_at, id, holds_slot, status, singleton_limit, workflow, namespace)
    WHERE singleton_key IS NOT NULL
      AND status IN ('blocked', 'cancelling', 'paused', 'pending', 'running', 'suspended');
