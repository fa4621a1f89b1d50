"""The admission model (model/admission.pml) and the stores' SQL stay in step.

The model names, above each step, the statements it stands for (lists headed ``sql:``,
``sql-fn:``, ``sqlite:``, ``py:``). A statement renamed or removed in the SQL fails the first
tests; a statement of the admission protocol the model does not name fails the others, and so
does a new statement that touches admission's columns or locks, until the model names it or
this file says why it stays outside the model.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from runlane.sqlfiles import named_statements

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "model" / "admission.pml"
PG_MIGRATIONS = ROOT / "src" / "runlane" / "stores" / "postgres" / "sql" / "migrations"

# The admission protocol: a start's gates, the claims (plain, admitting, parking, recovering),
# the bulk denial, the run queue's hand-off, a turn's suspension and settlement (release, wakes,
# the successor's hand-off), cancel_run's release and requeue_run's gate.
PROTOCOL = {
    "sql": {
        "lock_keys", "gate_counts", "insert_gated", "insert_gated_many", "insert_given",
        "insert_limited", "limit_counts", "claim_plain", "claim_admit", "blocked_set",
        "quiet_commit_if_parked", "lock_run", "lock_run_wait", "add_recovery", "admission_counts",
        "claim", "park", "lock_waiter_keys", "park_full_waiters", "quiet_commit", "settle",
        "fenced_writes", "wake_set", "hand_off_due", "rearm_held", "suspend", "run_tree",
        "lock_runs", "mark_cancelling", "requeue", "lock_keys_of_runs",
    },
    "sql-fn": {"runlane_start_counts", "runlane_limited_start_counts"},
    "sqlite": {
        "claimable", "admission_counts", "slot_holders", "next_waiters", "stamp_handoff",
        "wake_waiting", "request_wake_of_leased", "active_ids_of_key", "rearm_held",
        "descendant_ids", "due_ids",
    },
    "py": {
        "runbook.create", "runbook.claim", "runbook.settle", "runbook.finish",
        "runbook.park_full_waiters", "runbook.refusal", "admission.admits",
    },
}  # fmt: skip

# A PostgreSQL statement's SQLite twin(s): named by the model wherever the statement is.
TWINS = {
    "claim_plain": {"claimable"},
    "claim_admit": {"claimable", "admission_counts"},
    "admission_counts": {"admission_counts", "slot_holders"},
    "gate_counts": {"admission_counts", "active_ids_of_key"},
    "settle": {"next_waiters", "stamp_handoff"},
    "wake_set": {"wake_waiting", "request_wake_of_leased"},
    "hand_off_due": {"due_ids"},
    "rearm_held": {"rearm_held"},
    "run_tree": {"descendant_ids"},
}

# Statements that touch admission's columns or locks and stay outside the model, and why.
OUTSIDE = {
    "postgres": {
        "active_of_key": "a replacing start's cancellations (on_busy='replace')",
        "fire_windows": "schedules' ungated runs; a gated window goes through insert_gated",
        "insert_runs": "starts no gate counts (a continuation: pending, admitted by its claim)",
        "lane_runs": "a read for operators",
        "lane_runs_of_key": "a read for operators",
        "lane_members": "a read for operators",
        "lock_events": "the event log's lock",
        "settle_many": "settlements of runs without a singleton key",
        "spec_rows": "a fragment: a start's specs as rows",
        "pause_run": "a pause: a paused run is in no line (not a waiter) and keeps its slot",
        "resume_run": "a resume: the run is a waiter again, due at once, admitted by its claim",
        "wake_free_waiters": "a paused waiter's wake passed on, as settle wakes (modelled)",
    },
    "sqlite": {
        "lane_runs": "a read for operators",
        "lane_runs_of_key": "a read for operators",
        "lane_members": "a read for operators",
        "lane_members_of_quotas": "a read for operators",
    },
}

ADMISSION = re.compile(
    r"holds_slot|singleton_key|concurrency_key|pg_advisory_xact_lock|admission_retries"
    r"|runlane_start_counts|runlane_limited_start_counts"
)
NAMING = re.compile(r"(?<![\w`-])(sql-fn|sqlite|sql|py):\s+((?:[\w.]+)(?:,[\s*]+[\w.]+)*)")


def model_names(text: str) -> dict[str, set[str]]:
    """The names the model's comments give, by kind."""
    names: dict[str, set[str]] = {kind: set() for kind in PROTOCOL}
    for comment in re.findall(r"/\*.*?\*/", text, re.DOTALL):
        for kind, listed in NAMING.findall(comment):
            names[kind].update(re.split(r",[\s*]+", listed))
    return names


def statements(store: str) -> dict[str, str]:
    return named_statements(f"runlane.stores.{store}", "sql", "queries.sql")


def functions() -> set[str]:
    text = "\n".join(p.read_text() for p in PG_MIGRATIONS.glob("*.sql"))
    return set(re.findall(r"CREATE (?:OR REPLACE )?FUNCTION (\w+)", text))


NAMES = model_names(MODEL.read_text())


def test_the_model_names_only_statements_that_exist() -> None:
    assert NAMES["sql"] - set(statements("postgres")) == set()
    assert NAMES["sqlite"] - set(statements("sqlite")) == set()
    assert NAMES["sql-fn"] - functions() == set()


def test_the_python_the_model_names_exists() -> None:
    modules = {"runbook": "runlane.stores.runbook", "admission": "runlane.admission"}
    missing = []
    for name in NAMES["py"]:
        module, _, function = name.partition(".")
        if module not in modules or not callable(
            getattr(importlib.import_module(modules[module]), function, None)
        ):
            missing.append(name)
    assert missing == []


def test_every_statement_of_the_admission_protocol_is_named_by_the_model() -> None:
    for kind, pinned in PROTOCOL.items():
        assert pinned - NAMES[kind] == set(), f"{kind} statements the model does not name"


def test_a_named_statement_s_sqlite_twin_is_named_too() -> None:
    wanted = set().union(*(TWINS[name] for name in NAMES["sql"] if name in TWINS))
    assert wanted - NAMES["sqlite"] == set()


def test_every_statement_touching_admission_is_modelled_or_left_out_on_purpose() -> None:
    for store, kind in (("postgres", "sql"), ("sqlite", "sqlite")):
        touching = {name for name, body in statements(store).items() if ADMISSION.search(body)}
        unaccounted = touching - NAMES[kind] - set(OUTSIDE[store])
        assert unaccounted == set(), f"{store}: model them, or say why not in OUTSIDE"
        assert set(OUTSIDE[store]) <= set(statements(store)), "OUTSIDE names a statement gone"


def test_the_names_are_read_from_the_comments_only() -> None:
    text = "/* A step. sql: claim_plain, claim_admit;\n * sqlite: claimable; py: runbook.claim */"
    names = model_names(text + "\n`sql: not_a_comment`")
    assert names == {
        "sql": {"claim_plain", "claim_admit"},
        "sql-fn": set(),
        "sqlite": {"claimable"},
        "py": {"runbook.claim"},
    }
