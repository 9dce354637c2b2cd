# The README's two commands: `make demo` (the main job) and `make test`.
# Everything installs into .venv; torch is pinned here only (pyproject keeps a loose range).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
TORCH  ?= torch==2.13.0
RUN    ?= runs/demo-fsdp2
PORT   ?= 8050

.PHONY: setup demo test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q "$(TORCH)" -e ".[dash,dask,dev,fast]"
	touch $@

setup: $(VENV)/.installed

# Main job: profile a reference FSDP2 run (CPU + gloo, 2 ranks), analyze it, serve the dashboard.
demo: setup
	$(BIN)/overlapscope profile --out $(RUN) --force --steps 4 -- \
		$(BIN)/torchrun --standalone --nproc-per-node 2 -m instrumented_models.fsdp2 --prefetch 1
	$(BIN)/overlapscope analyze $(RUN)
	$(BIN)/overlapscope dashboard $(RUN) --port $(PORT)

# Tests: Chromium for the dashboard's browser tests, then the whole suite.
test: setup
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }
	$(BIN)/python -m pytest -q tests

clean:
	rm -rf $(VENV) runs .pytest_cache
