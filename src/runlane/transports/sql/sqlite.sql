-- The db transport's tables on SQLite (several processes on one host), created at open if missing.
-- Takers poll; heartbeats are rows every subscriber reads past its last seen id, pruned by age.

CREATE TABLE IF NOT EXISTS runlane_messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    topic TEXT NOT NULL,
    payload TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL
);

CREATE INDEX IF NOT EXISTS runlane_messages_queue_idx
    ON runlane_messages (queue, priority DESC, id);

CREATE INDEX IF NOT EXISTS runlane_messages_topic_idx
    ON runlane_messages (topic, priority DESC, id);

CREATE TABLE IF NOT EXISTS runlane_heartbeats (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    channel TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at REAL NOT NULL
);

CREATE INDEX IF NOT EXISTS runlane_heartbeats_channel_idx ON runlane_heartbeats (channel, id);
