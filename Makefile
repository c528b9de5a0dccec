# Two commands on a fresh machine (Python 3.11 on PATH as python3):
#   make run    creates .venv, installs the project, runs the main job end to end (embedded default)
#   make test   creates .venv, installs the project (+ the autotuner hooks' libraries), runs the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run test test-fast lint docs lock clean

$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --constraint requirements.lock --editable '.[dev]'
	touch $@

run: $(VENV)/.installed
	$(PY) -m pipelines.run $(ARGS)

# The autotuner hooks' libraries (pyproject's triton and tvm extras), for the tests that drive them; the main job
# does without.
$(VENV)/.extras: $(VENV)/.installed
	$(PY) -m pip install --quiet --constraint requirements.lock --editable '.[dev,triton,tvm]'
	touch $@

# The suite on every core (pytest-xdist), a test file on one worker (its module fixtures, some a tiny main job,
# run once: the per-test load scheduling ran them once per worker), the files in collection order (tests/conftest.py
# puts those reading the background tiny main job last); PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= auto
test: $(VENV)/.extras
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(ARGS)

test-fast: $(VENV)/.extras
	$(PY) -m pytest -m "not slow" $(ARGS)

# ruff (lint + format check, configured in pyproject.toml) and the docs site, as CI runs them.
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir $(or $(TMPDIR),/tmp)/costmodel-site

docs: $(VENV)/.installed
	$(VENV)/bin/mkdocs serve

# Re-pin the transitive closure after changing pyproject.toml.
lock: $(VENV)/.extras
	$(PY) -m pip freeze --exclude-editable | grep -v '^-e ' > requirements.lock

clean:
	rm -rf $(VENV) outputs
