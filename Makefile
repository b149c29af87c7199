# Two commands do all set-up on a fresh machine: `make demo` and `make test` (see README).
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup setup-test demo test bench lint

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $@

# The first demo tunes this machine's plan (a few minutes, cached); every run then uses it.
demo: setup
	$(BIN)/visionrt tune --if-missing
	$(BIN)/visionrt run --out out/demo --overwrite

# The tests also start a headless Chromium and a Mosquitto broker (scripts/setup_test.sh).
setup-test: setup
	bash scripts/setup_test.sh

test: setup-test
	$(BIN)/python -m pytest -q --durations=20

bench: setup
	$(BIN)/python scripts/bench_e2e.py

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check .
