# Every target creates .venv on first use: CPU torch first (a plain `torch`
# requirement could pull a multi-GB CUDA build), then Alilama in editable mode.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.alilama-installed
EXAMPLE_PLUGIN := docs/plugins/alilama-sinusoidal
PYTEST_ARGS ?=
QUICKSTART_ARGS ?=

.PHONY: install quickstart test bench docs docs-serve fuzz ci clean

$(STAMP): pyproject.toml CMakeLists.txt $(wildcard native/*.cpp native/*.hpp native/*.py) $(EXAMPLE_PLUGIN)/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -m pip install -q -e $(EXAMPLE_PLUGIN)
	@touch $(STAMP)

install: $(STAMP)

quickstart: $(STAMP)
	$(BIN)/alilama quickstart $(QUICKSTART_ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -q --benchmark-disable $(PYTEST_ARGS)

bench: $(STAMP)
	ALILAMA_BENCH_FULL=1 $(BIN)/python -m pytest benchmarks --benchmark-only \
		--benchmark-columns=median,iqr,rounds --benchmark-sort=name $(PYTEST_ARGS)

docs: $(STAMP)
	$(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	$(BIN)/mkdocs serve

fuzz: $(STAMP)
	bash scripts/fuzz_native.sh

ci: test docs fuzz

clean:
	rm -rf build site .pytest_cache .benchmarks
