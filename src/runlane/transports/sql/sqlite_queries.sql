-- name: insert
INSERT INTO runlane_messages (queue, topic, payload, priority, created_at) VALUES (?, ?, ?, ?, ?);

-- name: peek
SELECT 1 FROM runlane_messages
WHERE queue IN (SELECT value FROM json_each(?)) OR topic IN (SELECT value FROM json_each(?))
LIMIT 1;

-- name: claim
DELETE FROM runlane_messages
WHERE id IN (
    SELECT id FROM runlane_messages
    WHERE queue IN (SELECT value FROM json_each(?)) OR topic IN (SELECT value FROM json_each(?))
    ORDER BY priority DESC, id
    LIMIT ?
)
RETURNING id, priority, payload;

-- name: publish
INSERT INTO runlane_heartbeats (channel, payload, created_at) VALUES (?, ?, ?);

-- name: last_beat
SELECT coalesce(max(id), 0) FROM runlane_heartbeats;

-- name: read_beats
SELECT id, payload FROM runlane_heartbeats WHERE channel = ? AND id > ? ORDER BY id;

-- name: prune_beats
DELETE FROM runlane_heartbeats WHERE created_at < ?;

-- name: purge
DELETE FROM runlane_messages WHERE substr(queue, 1, length(?1)) = ?1;

-- name: purge_beats
DELETE FROM runlane_heartbeats WHERE substr(channel, 1, length(?1)) = ?1;
