VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint install bench clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/runlane demo

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy src

# Benchmarks against DBOS Transact (not part of `make test`); QUICK=1 for a short run.
PEERS_VENV := .peers-venv

$(PEERS_VENV)/bin/python: benchmarks/peer-requirements.txt
	python3 -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install -q -r benchmarks/peer-requirements.txt
	touch $@

bench: $(STAMP) $(PEERS_VENV)/bin/python
	QUICK=$(QUICK) $(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) build *.egg-info
