-- runlane schema for SQLite: the audit log (PostgreSQL's runlane_audit does the same).
--
-- Every operator action taken through the HTTP API or the command line, appended, never
-- changed: when, who, through what, which action on which run, and how it went. Read newest
-- first by id (a namespace's own entries through the second index).
CREATE TABLE audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    actor TEXT NOT NULL,
    source TEXT NOT NULL,
    action TEXT NOT NULL,
    outcome TEXT NOT NULL,
    run_id TEXT,
    namespace TEXT,
    detail TEXT
);
CREATE INDEX audit_namespace ON audit (namespace, id);
