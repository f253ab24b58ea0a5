# Every target creates .venv on first use: torch first (a plain `torch` requirement
# could pull a multi-GB CUDA build), then Alilama in editable mode and the example
# plugin. The test-only plugins (tests/plugins/alilama-*) are never installed into
# .venv: `make test` builds them into build/test-plugins, which only the test
# suite puts on its path. The torch build is chosen by two variables:
#
#   make install                                       torch==2.13.0 as pip resolves it here (the CPU build)
#   make install TORCH_PIP_ARGS="--index-url URL"      a CUDA build from PyTorch's wheel index for your CUDA
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.alilama-installed
TORCH_VERSION ?= 2.13.0
TORCH_PIP_ARGS ?=
EXAMPLE_PLUGIN := docs/plugins/alilama-sinusoidal
TEST_PLUGINS   := $(wildcard tests/plugins/alilama-*)
TEST_PLUGIN_DIR := build/test-plugins
TEST_STAMP     := $(TEST_PLUGIN_DIR)/.installed
# A Python without Alilama that reads exports as other tools' environments do: the oldest
# transformers the project admits (the version optimum-onnx pins), optimum-onnx and onnxruntime.
READERS_ENV    := build/envs/readers
READERS_PACKAGES ?= transformers==4.57.6 optimum-onnx==0.1.0 onnxruntime==1.32.0
READERS_STAMP  := $(READERS_ENV)/.installed-transformers-4.57.6
# llama.cpp, as llama-cpp-python builds it, and llama.cpp's own converter from the same source release.
LLAMA_CPP_VERSION ?= 0.3.36
LLAMA_STAMP    := $(READERS_ENV)/.llama-cpp-$(LLAMA_CPP_VERSION)
LLAMA_SRC      := build/llama-cpp-src
PYTEST_ARGS ?=
# Test files spread over this many processes (pytest-xdist; each file stays in one process). 1: serial.
TEST_WORKERS ?= 2
PYTEST_XDIST := $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)
QUICKSTART_ARGS ?=

.PHONY: readers lmeval llama-cpp install quickstart test test-slow test-all coverage lint format bench docs docs-serve fuzz native-tests ci clean essay-config figures

$(STAMP): pyproject.toml CMakeLists.txt $(wildcard native/*.cpp native/*.hpp native/*.py) $(EXAMPLE_PLUGIN)/pyproject.toml
	@echo "[setup 1/4] creating $(VENV) (once; later runs reuse it)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@echo "[setup 2/4] installing PyTorch $(TORCH_VERSION) (the largest download: a few minutes)"
	$(BIN)/python -m pip install -q torch==$(TORCH_VERSION) $(TORCH_PIP_ARGS)
	@echo "[setup 3/4] installing Alilama in editable mode (compiles the C++ tokenizer: a few minutes)"
	$(BIN)/python -m pip install -q -e '.[dev]'
	@echo "[setup 4/4] installing the example plugin ($(EXAMPLE_PLUGIN))"
	$(BIN)/python -m pip install -q -e $(EXAMPLE_PLUGIN)
	@# test-only plugins that older versions of this Makefile installed into .venv
	-$(BIN)/python -m pip uninstall -q -y $(notdir $(TEST_PLUGINS)) 2>/dev/null
	@touch $(STAMP)

# The test-only plugins, for the test suite alone (conftest.py puts the folder on sys.path
# and on the PYTHONPATH of the processes the tests start).
$(TEST_STAMP): $(STAMP) $(foreach p,$(TEST_PLUGINS),$(shell find $(p) -name '*.py' -o -name pyproject.toml | grep -v egg-info))
	rm -rf $(TEST_PLUGIN_DIR)
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation --target $(TEST_PLUGIN_DIR) $(TEST_PLUGINS)
	@touch $(TEST_STAMP)

# GPT-2's vocabulary as openai-whisper ships it (whisper/assets/gpt2.tiktoken), for tests/tokenizer/test_import.py.
GPT2_VOCAB_DIR := build/vocab/whisper-20250625
$(GPT2_VOCAB_DIR)/.installed: | $(STAMP)
	rm -rf $(GPT2_VOCAB_DIR) && $(BIN)/python -m pip install -q --no-deps --target $(GPT2_VOCAB_DIR) openai-whisper==20250625
	@touch $@

# tests/hf/test_reader_versions.py reads every export with it (skipped where it is missing).
$(READERS_STAMP):
	@echo "[readers] a Python without Alilama for the export tests: torch $(TORCH_VERSION), $(READERS_PACKAGES) (once, about a minute)"
	rm -rf $(READERS_ENV)
	$(PYTHON) -m venv $(READERS_ENV)
	$(READERS_ENV)/bin/python -m pip install -q torch==$(TORCH_VERSION) $(TORCH_PIP_ARGS)
	$(READERS_ENV)/bin/python -m pip install -q $(READERS_PACKAGES)
	@touch $(READERS_STAMP)

readers: $(READERS_STAMP)

# tests/hf/test_lm_eval.py runs lm-eval in it against `alilama serve` and an export (skipped where it is missing).
LMEVAL_ENV     := build/envs/lmeval
LMEVAL_PACKAGES ?= lm-eval[hf,api]==0.4.13
LMEVAL_STAMP   := $(LMEVAL_ENV)/.installed-lm-eval-0.4.13
$(LMEVAL_STAMP):
	@echo "[lm-eval] a Python without Alilama for the served-model evaluation test: torch $(TORCH_VERSION), $(LMEVAL_PACKAGES)"
	rm -rf $(LMEVAL_ENV)
	$(PYTHON) -m venv $(LMEVAL_ENV)
	$(LMEVAL_ENV)/bin/python -m pip install -q torch==$(TORCH_VERSION) $(TORCH_PIP_ARGS)
	$(LMEVAL_ENV)/bin/python -m pip install -q '$(LMEVAL_PACKAGES)'
	@touch $(LMEVAL_STAMP)

lmeval: $(LMEVAL_STAMP)

# tests/hf/test_gguf.py runs the GGUF exports in it (skipped where it is missing). The first build
# compiles llama.cpp (about 10 minutes on two cores); pip keeps the wheel, so later builds take seconds.
$(LLAMA_STAMP): $(READERS_STAMP)
	@echo "[llama.cpp] llama-cpp-python $(LLAMA_CPP_VERSION) into $(READERS_ENV) (the first time it compiles llama.cpp: about 10 minutes)"
	CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(READERS_ENV)/bin/python -m pip install -q llama-cpp-python==$(LLAMA_CPP_VERSION)
	rm -rf $(LLAMA_SRC) && mkdir -p $(LLAMA_SRC)/sdist
	$(READERS_ENV)/bin/python -m pip download -q --no-deps --no-binary :all: -d $(LLAMA_SRC)/sdist llama-cpp-python==$(LLAMA_CPP_VERSION)
	tar xzf $(LLAMA_SRC)/sdist/llama_cpp_python-$(LLAMA_CPP_VERSION).tar.gz -C $(LLAMA_SRC) --strip-components=3 \
		llama_cpp_python-$(LLAMA_CPP_VERSION)/vendor/llama.cpp/convert_hf_to_gguf.py \
		llama_cpp_python-$(LLAMA_CPP_VERSION)/vendor/llama.cpp/conversion \
		llama_cpp_python-$(LLAMA_CPP_VERSION)/vendor/llama.cpp/gguf-py
	rm -rf $(LLAMA_SRC)/sdist
	@touch $(LLAMA_STAMP)

llama-cpp: $(LLAMA_STAMP)

# tests/hf/test_reader_versions.py loads the ONNX exports with it in Node, offline (skipped where it is missing).
# --ignore-scripts: onnxruntime-node ships its CPU binaries in the package; nothing is downloaded at install.
TRANSFORMERS_JS_VERSION ?= 4.3.2
TRANSFORMERS_JS_DIR := build/transformers-js
TRANSFORMERS_JS_STAMP := $(TRANSFORMERS_JS_DIR)/.installed-$(TRANSFORMERS_JS_VERSION)
$(TRANSFORMERS_JS_STAMP):
	@command -v npm >/dev/null || { echo "[transformers.js] needs Node.js 18 or later and npm on the PATH"; exit 1; }
	@echo "[transformers.js] npm's @huggingface/transformers $(TRANSFORMERS_JS_VERSION) into $(TRANSFORMERS_JS_DIR) (once, about 15 s)"
	rm -rf $(TRANSFORMERS_JS_DIR) && mkdir -p $(TRANSFORMERS_JS_DIR)
	cd $(TRANSFORMERS_JS_DIR) && npm install --ignore-scripts --no-audit --no-fund --silent @huggingface/transformers@$(TRANSFORMERS_JS_VERSION)
	@touch $(TRANSFORMERS_JS_STAMP)

.PHONY: transformers-js
transformers-js: $(TRANSFORMERS_JS_STAMP)

install: $(STAMP)

quickstart: $(STAMP)
	$(BIN)/alilama quickstart $(QUICKSTART_ARGS)

# The fast tier (README's test command): every test folder, no test that starts a process, a server, a
# training run, another Python or Ray (tests/alilama_tiers.py sorts them), each held to ALILAMA_FAST_LIMIT seconds.
test: $(TEST_STAMP) $(GPT2_VOCAB_DIR)/.installed
	@echo "running the fast tier on $(TEST_WORKERS) process(es): about 4 minutes on two free CPU cores (make test-all: everything)"
	$(BIN)/python -m pytest -q --benchmark-disable --tier fast $(PYTEST_XDIST) $(PYTEST_ARGS)

# The slow tier alone: what `make test` leaves out (CI runs both, so every test runs once).
test-slow: $(TEST_STAMP) $(READERS_STAMP) $(GPT2_VOCAB_DIR)/.installed
	@echo "running the slow tier on $(TEST_WORKERS) process(es): about 25 minutes on two free CPU cores"
	$(BIN)/python -m pytest -q --benchmark-disable -m slow $(PYTEST_XDIST) $(PYTEST_ARGS)

# Both tiers in one run.
test-all: $(TEST_STAMP) $(READERS_STAMP) $(GPT2_VOCAB_DIR)/.installed
	@echo "running both tiers on $(TEST_WORKERS) process(es): about half an hour on two free CPU cores"
	$(BIN)/python -m pytest -q --benchmark-disable $(PYTEST_XDIST) $(PYTEST_ARGS)

# Lines covered by each tier, per layer (build/coverage-{fast,all}.txt); docs/contributing.md shows the table.
# Every test runs once: the fast tier, then the slow tier added to its data (the full tier's coverage).
coverage: $(TEST_STAMP) $(READERS_STAMP) $(GPT2_VOCAB_DIR)/.installed
	rm -f .coverage .coverage.*
	$(BIN)/python -m pytest -q --benchmark-disable --tier full -m "not slow" $(PYTEST_XDIST) --cov --cov-report= $(PYTEST_ARGS)
	$(BIN)/python scripts/coverage_by_layer.py > build/coverage-fast.txt
	$(BIN)/python -m pytest -q --benchmark-disable -m slow $(PYTEST_XDIST) --cov --cov-append --cov-report= $(PYTEST_ARGS)
	$(BIN)/python scripts/coverage_by_layer.py > build/coverage-all.txt
	cat build/coverage-fast.txt build/coverage-all.txt

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: $(STAMP)
	$(BIN)/ruff format .

# configs/essay.yaml is written from the `essay` preset (tests/core/test_config.py checks they agree).
essay-config: $(STAMP)
	$(BIN)/python -c "from alilama_core.engine.configs import write_preset; write_preset('essay', 'configs/essay.yaml')"

bench: $(TEST_STAMP)
	ALILAMA_BENCH_FULL=1 $(BIN)/python -m pytest benchmarks --benchmark-only \
		--benchmark-columns=median,iqr,rounds --benchmark-sort=name $(PYTEST_ARGS)

docs: $(STAMP)
	$(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	$(BIN)/mkdocs serve

# The pictures of docs/tape.md: trains two small runs once (build/figures), then draws.
figures: $(STAMP)
	$(BIN)/python scripts/make_figures.py

fuzz: $(STAMP)
	bash scripts/fuzz_native.sh

# The C++ unit tests of native/ (a plain executable, built apart from the Python module).
native-tests:
	bash scripts/native_tests.sh

ci: lint test test-slow docs fuzz native-tests

clean:
	rm -rf build site .pytest_cache .benchmarks
