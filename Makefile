# Two commands do all set-up on a fresh machine: `make demo` and `make test` (see README).
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup depth-model setup-test demo test test-loaded bench lint docs screenshots

# Everything: what the demo needs, and the depth model the tests and `--depth` examples use.
setup: $(VENV)/.installed depth-model

# What the demo needs: the demo video, the virtual environment with visionrt, the demo model.
$(VENV)/.installed: pyproject.toml scripts/setup.sh
	VENV=$(VENV) bash scripts/setup.sh
	touch $@

# The architecture-only depth model (built once, cached; the demo's run uses none, and the demo
# plans it with `tune --depth` once it is built).
depth-model: $(VENV)/.installed
	VENV=$(VENV) bash scripts/setup_depth.sh

# Results first: on a machine with no tuned plan yet, the FP32 reference's run, then `tune`
# (minutes, once: the plan is cached), then the run again on the plan; later, one run on it,
# replacing the last demo's results (--overwrite: a run refuses an earlier run's outputs).
demo: $(VENV)/.installed
	$(BIN)/visionrt demo --out out/demo --overwrite

# The tests also start a headless Chromium and a Mosquitto broker (scripts/setup_test.sh).
setup-test: setup
	VENV=$(VENV) bash scripts/setup_test.sh

test: setup-test
	$(BIN)/python -m pytest -q --durations=20

# The same suite with every core busy (stress-ng): what passes only on a quiet machine fails here.
test-loaded: setup-test
	VENV=$(VENV) bash scripts/test_loaded.sh

bench: $(VENV)/.installed
	$(BIN)/python scripts/bench_e2e.py

lint: $(VENV)/.installed
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/mypy

# The documentation site into site/ (MkDocs; its reference pages generated from the code first).
docs: setup-test
	$(BIN)/python scripts/docs_reference.py
	$(BIN)/mkdocs build --strict

# The docs' pictures (the serve live view, a frame with depth), made by a script: docs/images/.
screenshots: setup-test
	$(BIN)/python scripts/screenshots.py
