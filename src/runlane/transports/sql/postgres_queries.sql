-- name: insert
-- One statement for a whole batch; the notifications go out when it commits.
WITH inserted AS (
    INSERT INTO runlane_messages (queue, topic, payload, priority)
    SELECT m.queue, m.topic, m.payload::jsonb, m.priority
    FROM unnest(%(queues)s::text[], %(topics)s::text[], %(payloads)s::text[], %(priorities)s::int[])
        WITH ORDINALITY AS m(queue, topic, payload, priority, n)
    ORDER BY m.n
    RETURNING 1
)
SELECT pg_notify(channel, '') FROM unnest(%(channels)s::text[]) AS channel;

-- name: claim
DELETE FROM runlane_messages
WHERE id IN (
    SELECT id FROM runlane_messages
    WHERE queue = ANY(%(queues)s::text[]) OR topic = ANY(%(topics)s::text[])
    ORDER BY priority DESC, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING id, priority, payload;

-- name: publish
SELECT pg_notify(%(channel)s, %(payload)s);

-- name: purge
DELETE FROM runlane_messages WHERE starts_with(queue, %(prefix)s);
