# privfair: `make run` and `make test` are all a fresh machine needs.
PYTHON      ?= python3
VENV        ?= .venv
TORCH_SPEC  ?= torch==2.13.0
TEST_WORKERS ?= 2
BIN         := $(VENV)/bin
STAMP       := $(VENV)/.installed
SHARED_DATA := $(abspath ../shared/datasets)

# Point the loaders at the shared data directory when it exists and the user has not chosen one.
ifeq ($(origin PRIVFAIR_DATA_DIR), undefined)
ifneq ($(wildcard $(SHARED_DATA)),)
export PRIVFAIR_DATA_DIR := $(SHARED_DATA)
endif
endif

.PHONY: setup run test test-all reproduce regress docs bench lint clean audit audit-mutants

setup: $(STAMP)

# Torch goes in first so that the project's `torch>=...` requirement is already met by the CPU build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $(STAMP)

run: setup
	$(BIN)/privfair run algo=pfdr data=adult eps=1

# The suite in TEST_WORKERS processes (pytest-xdist; tests use their own tmp dirs, caches are written atomically).
test: setup
	$(BIN)/python -m pytest -m "not slow" -x -n $(TEST_WORKERS)

test-all: setup
	$(BIN)/python -m pytest

# Every paper table; JOBS runs side by side (make reproduce JOBS=0: one per core).
JOBS ?= 1
reproduce: setup
	$(BIN)/privfair reproduce all --jobs $(JOBS)

# The exact regression guard: every comparison re-derived from its run record, a sample of recorded runs re-run.
regress: setup
	$(BIN)/privfair reproduce all --check

# docs/reproduction.md and the README's summary, from the committed comparisons (tests/test_docs.py checks them).
docs: setup
	$(BIN)/python -m privfair_cli.tools.docs

# Every registered private algorithm audited on small data, and DP-SGD's white-box one-run audit at eps = 4 on
# MNIST (the tightness rows): results/audit/ and docs/audit.md.
audit: setup
	$(BIN)/python -m privfair_cli.tools.audit --all

# The mutant catalogue: every deliberately broken variant flagged, the same configurations without a bug passing;
# the table of docs/audit.md (its fast part runs in `make test`, tests/test_audit_mutants.py).
audit-mutants: setup
	$(BIN)/python -m privfair_cli.tools.audit --mutants

bench: setup
	$(BIN)/python -m bench

lint: setup
	$(BIN)/ruff check privfair_cli algorithms datasets tests bench

clean:
	rm -rf $(VENV) results/runs results/multirun
