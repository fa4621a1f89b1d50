VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LOCK := requirements/dev.lock

.PHONY: demo test lint docs install lock dist bench bench-queues bench-scale bench-wal chaos model clean

# The development environment: the exact versions of the lock file, then runlane itself
# (editable, no dependency resolution of its own, so nothing drifts from the lock).
$(STAMP): pyproject.toml $(LOCK)
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -r $(LOCK)
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# The demo's environment: runlane and what it runs on, the http extra included (for `runlane
# serve` on the demo's database), at the lock's versions, without the development tools. Its
# own venv, so `make demo` takes seconds where `make install` takes minutes.
DEMO_VENV ?= .demo-venv
DEMO_STAMP := $(DEMO_VENV)/.installed

$(DEMO_STAMP): pyproject.toml $(LOCK)
	python3 -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install -q -c $(LOCK) -e '.[http]'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(DEMO_VENV)/bin/runlane demo

# Two phases (tests/conftest.py): the suite on two workers, then the heavy tests on three.
# Exit code 5 is "no test selected", which a PYTEST_ARGS selection can leave one phase with.
# The heavy phase needs no schemathesis plugin (the HTTP fuzz test is in the first), whose
# session-end import (under assertion rewriting) failed with CPython 3.11.7's "AST constructor
# recursion depth mismatch" after the heavy tests, Hypothesis's among them, ran in that process.
# Bytecode files are written (a PYTHONDONTWRITEBYTECODE in the environment is lifted): without
# them every pytest worker rewrites and compiles each test module again, 8 s of CPU apiece.
test: export PYTHONDONTWRITEBYTECODE :=
test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -n 2 -m "not heavy" $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(PY) -m pytest -q -p no:cacheprovider -p no:schemathesis -n 3 -m heavy $(PYTEST_ARGS) || [ $$? -eq 5 ]

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks chaos docs/examples
	$(VENV)/bin/ruff format --check src tests benchmarks chaos docs/examples
	$(VENV)/bin/mypy src tests

# The documentation site (mkdocs.yml, docs/), strict: a warning or a broken link fails it. Built
# into .site/ (gitignored) and thrown away: the pages are the source.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# Re-resolve the lock after a change to pyproject.toml's dependencies; versions already locked
# stay unless the new bounds exclude them (pip-tools, in a throwaway venv).
lock:
	tools=$$(mktemp -d) && python3 -m venv $$tools && $$tools/bin/pip install -q 'pip-tools>=7.4' \
	  && CUSTOM_COMPILE_COMMAND="make lock" $$tools/bin/pip-compile -q --extra dev --strip-extras \
	     --unsafe-package runlane --no-emit-index-url --no-emit-find-links --no-emit-trusted-host \
	     --annotation-style line -o $(LOCK) pyproject.toml; \
	  status=$$?; rm -rf $$tools; exit $$status

# The wheel and the sdist, in dist/ (tests/e2e/test_packaging.py installs and checks them).
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --outdir dist .

# Benchmarks against the peers, DBOS Transact and Absurd (not part of `make test`); QUICK=1 for a
# short run. Each peer has its own venv, built from its pinned requirements; the drivers are in
# benchmarks/peers/. Absurd's schema is read from ../shared/peers/absurd/ (skipped when absent).
# A QUICK=1 run writes /tmp/BENCHMARKS-quick.md (or $BENCH_OUT), never BENCHMARKS.md.
PEERS_VENV := .peers-venv
ABSURD_VENV := .absurd-venv

# A stamp file, not bin/python: that is a symlink, and touch would follow it to the system's.
$(PEERS_VENV)/.installed: benchmarks/peer-requirements.txt
	python3 -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install -q -r benchmarks/peer-requirements.txt
	touch $@

$(ABSURD_VENV)/.installed: benchmarks/absurd-requirements.txt
	python3 -m venv $(ABSURD_VENV)
	$(ABSURD_VENV)/bin/pip install -q -r benchmarks/absurd-requirements.txt
	touch $@

bench: $(STAMP) $(PEERS_VENV)/.installed $(ABSURD_VENV)/.installed bench-queues
	QUICK=$(QUICK) $(PY) benchmarks/run.py
	$(PY) benchmarks/charts.py

# runlane against the PostgreSQL job queues (issue 40): procrastinate from its own venv,
# graphile-worker and pg-boss in Node from benchmarks/peers/node/ (its package-lock.json).
# Figures into benchmarks/results/queues.json (a QUICK=1 run: /tmp), rendered into BENCHMARKS.md.
QUEUES_VENV := .queues-venv
NODE_PEERS := benchmarks/peers/node

$(QUEUES_VENV)/.installed: benchmarks/queues-requirements.txt
	python3 -m venv $(QUEUES_VENV)
	$(QUEUES_VENV)/bin/pip install -q -r benchmarks/queues-requirements.txt
	touch $@

$(NODE_PEERS)/node_modules/.installed: $(NODE_PEERS)/package-lock.json
	cd $(NODE_PEERS) && npm ci --no-audit --no-fund
	touch $@

bench-queues: $(STAMP) $(QUEUES_VENV)/.installed $(NODE_PEERS)/node_modules/.installed
	QUICK=$(QUICK) $(PY) benchmarks/queues.py
	[ "$(QUICK)" = 1 ] || $(PY) benchmarks/scale_report.py

# A million finished runs and 10,000 active ones in PostgreSQL and SQLite: the claim path
# against an empty store, and the console's reads (benchmarks/million.py; QUICK=1: 100,000).
bench-scale: $(STAMP)
	QUICK=$(QUICK) $(PY) benchmarks/million.py
	$(PY) benchmarks/charts.py
	[ "$(QUICK)" = 1 ] || $(PY) benchmarks/scale_report.py

# WAL bytes per run, by relation and record, on a PostgreSQL server of its own (initdb, a
# loopback port): no neighbour's writes in the figure (benchmarks/wal.py).
bench-wal: $(STAMP)
	$(PY) benchmarks/wal.py --json benchmarks/results/wal.json
	$(PY) benchmarks/scale_report.py

# A chaos run on real processes (not part of `make test`; see RELIABILITY.md): CHAOS_SECONDS of
# faults (300 by default), CHAOS_SEED (random by default, printed), CHAOS_REPORT (where the
# figures go; RELIABILITY.md by default), CHAOS_STANDBY=sync|async (a primary and a standby, and
# the "failover" fault), CHAOS_STANDBY_LAG, CHAOS_FAULTS (see chaos/runner.py). Exits non-zero
# when an invariant is broken.
chaos: $(STAMP)
	$(PY) -m chaos

# The admission model (model/admission.pml; RELIABILITY.md, "A checked model of admission"):
# spin searches every interleaving within its bounds and fails when a property does (about a
# minute). MUTANT=<fifo|nowake|snapshot|unlocked|quota> checks a broken protocol instead, which
# must fail. Needs spin and a C compiler (Debian: apt-get install spin), not the venv.
model:
	python3 model/check.py $(if $(MUTANT),--mutant $(MUTANT))

clean:
	rm -rf $(VENV) $(DEMO_VENV) $(PEERS_VENV) $(ABSURD_VENV) $(QUEUES_VENV) $(NODE_PEERS)/node_modules build dist *.egg-info .site
