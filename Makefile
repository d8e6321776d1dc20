# rollout-service: `make run` starts the server, `make test` runs the tests (each installs first).
#
# Everything Python lives in a project virtual environment, .venv, made from $(PYTHON) (any
# Python 3.11+; `make PYTHON=python3.12 ...` picks another). Nothing is installed into the
# system interpreter, which Debian 12 and Ubuntu 23.04+ mark "externally managed" (PEP 668).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BUF_VERSION := 1.75.0
BUF := .tools/node_modules/.bin/buf
PROTO := proto/rollout/v1/rollout.proto
# The generated Python stubs of $(PROTO), the distribution rollout-proto: the server and the
# client both depend on it, neither on the other.
STUBS := proto/python
STAMP := $(VENV)/installed.stamp
# verifiers (the client's `verifiers` extra, docs/verifiers.md) pins openai<3, and the dev
# tools pin openai 3: its tests run it from an interpreter of its own.
VERIFIERS_VENV := .venv-verifiers
# Every dependency comes as a wheel: a source build (a Rust toolchain for ripgrep, say) is a
# failure to fix in pyproject.toml, not something to attempt on a user's machine.
PIP_INSTALL := $(PY) -m pip install --quiet --disable-pip-version-check --only-binary :all:
# pip puts the mypy-protobuf plugin beside the venv's interpreter.
MYPY_GRPC := --plugin=protoc-gen-mypy_grpc=$(VENV)/bin/protoc-gen-mypy_grpc
# buf, which only `make lint` needs, from npm. When npm fails (its registry unreachable, a TLS
# proxy it does not trust), say why in npm's own words, without its stack trace, and fail:
# `make install` goes on without buf, `make lint` stops.
BUF_LOG := .tools/buf-install.log
BUF_INSTALL = mkdir -p .tools && npm install --no-audit --no-fund --loglevel=error \
  --prefix .tools @bufbuild/buf@$(BUF_VERSION) >$(BUF_LOG) 2>&1 || { \
  echo "buf $(BUF_VERSION) (for make lint) could not be installed from npm:"; \
  grep -vE '^npm error( *$$|  | *[{}]$$)' $(BUF_LOG) | sed 's/^/  /'; \
  echo "  (a TLS proxy: point npm_config_cafile at its CA; the whole log: $(BUF_LOG))"; false; }

.PHONY: install harbor-venv run test test-real-model proto proto-check lint bench clean base-image web

install: $(STAMP)

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "$(PYTHON) is older than Python 3.11: run make PYTHON=python3.11 (or newer)"; exit 1; }
	@$(PYTHON) -m venv $(VENV) 2>/dev/null || { rm -rf $(VENV); \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null && $(PYTHON) -m venv $(VENV); \
	  else echo "$(PYTHON) cannot make a virtual environment: install python3-venv (Debian/Ubuntu: sudo apt-get install python3-venv)"; exit 1; fi; }

$(STAMP): pyproject.toml client/pyproject.toml $(STUBS)/pyproject.toml | $(PY)
	@command -v bwrap >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; \
	  else echo "install bubblewrap (Debian/Ubuntu: sudo apt-get install bubblewrap)"; exit 1; fi; }
	@{ command -v mmdebstrap && command -v buildah; } >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq mmdebstrap buildah >/dev/null; \
	  else echo "local sandboxes' default image (the Debian base) needs mmdebstrap and buildah" \
	    "(sudo apt-get install mmdebstrap buildah), or ROLLOUT_SANDBOX_IMAGE=host"; fi; }
	$(PIP_INSTALL) -e ./$(STUBS) -e ./client -e '.[dev]'
	$(PYTHON) -m venv $(VERIFIERS_VENV)
	$(VERIFIERS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
	  --only-binary :all: -e ./$(STUBS) -e './client[verifiers]'
	@command -v npm >/dev/null || echo "npm not found: the server will reject opencode rollouts" \
	  "and make lint cannot run buf until Node.js and npm are installed (apt-get install npm)"
	@if command -v npm >/dev/null; then $(BUF_INSTALL) || \
	  echo "going on without buf: make lint installs it when npm can reach its registry"; fi
	touch $(STAMP)

run: install
	$(PY) -m service.server

# Two workers (this machine's and CI's cores: about 12 minutes on two, 2026-12-02); a test
# file, with its module-scoped server, stays on one worker. `make test TEST_WORKERS=0` runs
# the suite in one process. The Debian base image is made first (a cache hit after the first
# time): it is what the sandboxes run on, as opencode's install is what the agents run.
TEST_WORKERS ?= 2
test: install harbor-venv base-image
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15

# Harbor's own released CLI, in a venv of its own (Harbor needs Python 3.12+; this project's
# .venv may be 3.11), with this client installed into it: tests/harbor/test_environment.py runs
# `harbor run` through it. Without a Python 3.12 those tests skip, saying so.
HARBOR_VENV := .harbor-venv
HARBOR_VERSION := 0.25.*
HARBOR_PYTHON ?= $(shell for p in python3.13 python3.12 $(wildcard /root/.pyenv/versions/3.1[23]*/bin/python3); do \
  command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null \
  && { command -v $$p; break; }; done)
harbor-venv: $(HARBOR_VENV)/installed.stamp

$(HARBOR_VENV)/installed.stamp: client/pyproject.toml $(STUBS)/pyproject.toml
	@if [ -z "$(HARBOR_PYTHON)" ]; then echo "no Python 3.12+: Harbor's tests will skip"; else \
	  $(HARBOR_PYTHON) -m venv $(HARBOR_VENV) && \
	  $(HARBOR_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
	    'harbor==$(HARBOR_VERSION)' -e ./$(STUBS) -e './client[harbor]' && touch $@; fi

# A real model (SmolLM2-135M on llama-cpp-python's server) through the service. The server is
# built once into ~/.cache/rollout-service-build (about 7 minutes on 2 cores), then reused.
test-real-model: install
	ROLLOUT_LLAMA_PYTHON="$$(PYTHON=$(PYTHON) scripts/real_model/install_llama_server.sh | tail -n 1)" \
	  $(PY) -m pytest -q -s -p no:cacheprovider tests/real_model

proto: install
	$(PY) -m grpc_tools.protoc -Iproto --python_out=$(STUBS) --pyi_out=$(STUBS) \
	  --grpc_python_out=$(STUBS) --mypy_grpc_out=$(STUBS) $(MYPY_GRPC) $(PROTO)

# CI fails when the checked-in stubs differ from what `make proto` generates.
proto-check: install
	rm -rf .tools/proto-check && mkdir -p .tools/proto-check
	$(PY) -m grpc_tools.protoc -Iproto --python_out=.tools/proto-check --pyi_out=.tools/proto-check \
	  --grpc_python_out=.tools/proto-check --mypy_grpc_out=.tools/proto-check $(MYPY_GRPC) $(PROTO)
	for f in rollout_pb2.py rollout_pb2.pyi rollout_pb2_grpc.py rollout_pb2_grpc.pyi; do \
	  diff -u $(STUBS)/rollout/v1/$$f .tools/proto-check/rollout/v1/$$f || \
	  { echo "$(STUBS)/rollout/v1/$$f is stale: run make proto"; exit 1; }; done

# The dashboard's page (committed in service/dashboard/static/): TypeScript stubs of proto/ (buf,
# protoc-gen-es), type-checked and bundled by esbuild, every tool pinned by web/package-lock.json.
# tests/dashboard/test_bundle.py fails when the committed files differ from what this makes.
web:
	cd web && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build

lint: install proto-check
	@test -x $(BUF) || { command -v npm >/dev/null || { \
	  echo "make lint needs buf from npm: install Node.js and npm"; exit 1; }; $(BUF_INSTALL); }
	$(BUF) lint
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

bench: install
	$(PY) bench/run.py

# The default image of local sandboxes (the Debian base, mmdebstrap; root, 1-3 minutes), made
# ahead instead of by the first rollout.
base-image: install
	$(PY) -m service.images base

clean:
	rm -rf $(VENV) $(VERIFIERS_VENV) .tools .mypy_cache .ruff_cache .pytest_cache web/node_modules
