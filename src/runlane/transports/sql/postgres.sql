-- The db transport's tables on PostgreSQL, created by DbTransport.open() if missing.
-- A message row lives from send to take; a take deletes it (DELETE ... RETURNING).

CREATE TABLE IF NOT EXISTS runlane_messages (
    id bigserial PRIMARY KEY,
    queue text NOT NULL,            -- <prefix>:runs:... | <prefix>:tasks:<group> | <prefix>:results | <prefix>:decisions:<code>
    topic text NOT NULL,            -- <prefix>:runs:*:<code> for the run queues of a code, else the queue itself
    payload jsonb NOT NULL,
    priority integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS runlane_messages_queue_idx
    ON runlane_messages (queue, priority DESC, id);

CREATE INDEX IF NOT EXISTS runlane_messages_topic_idx
    ON runlane_messages (topic, priority DESC, id);
