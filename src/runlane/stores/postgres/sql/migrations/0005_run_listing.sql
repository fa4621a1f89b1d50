-- Listing runs by status or by tag, newest first, paged by (created_at, id) from a cursor: an
-- index walk whatever the page's depth, with 100,000 runs as with 100.
CREATE INDEX runlane_runs_status_newest ON runlane_runs (status, created_at DESC, id DESC);
-- A tag filter (tags @> ARRAY[tag]): the runs carrying a rare tag without reading the others.
CREATE INDEX runlane_runs_tags ON runlane_runs USING gin (tags);
