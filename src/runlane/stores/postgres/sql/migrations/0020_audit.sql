-- runlane schema for PostgreSQL: the audit log (SQLite's audit table does the same).
--
-- Every operator action taken through the HTTP API or the command line, appended, never
-- changed: when, who, through what, which action on which run, and how it went. Read newest
-- first by id (a namespace's own entries through the second index).
CREATE TABLE runlane_audit (
    id bigserial PRIMARY KEY,
    at timestamptz NOT NULL,
    actor text NOT NULL,
    source text NOT NULL,
    action text NOT NULL,
    outcome text NOT NULL,
    run_id text,
    namespace text,
    detail text
);
CREATE INDEX runlane_audit_namespace ON runlane_audit (namespace, id);
