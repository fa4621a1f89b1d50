-- How many times the current attempt of a remote step was sent (re-sends of a lost dispatch).
ALTER TABLE runlane_steps ADD COLUMN dispatches integer NOT NULL DEFAULT 0;
