-- runlane schema for SQLite, version 4: listing runs by status, newest first, paged by
-- (created_at, id) from a cursor. (PostgreSQL's migration 0005 does the same, with tags.)
CREATE INDEX runs_status_newest ON runs (status, created_at DESC, id DESC);
