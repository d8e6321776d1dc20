# rollout-service: `make run` starts the server, `make test` runs the tests (each installs first).
PYTHON ?= python3
BUF_VERSION := 1.75.0
BUF := .tools/node_modules/.bin/buf
PROTO := proto/rollout/v1/rollout.proto
STAMP := .tools/installed.stamp
# pip puts the mypy-protobuf plugin beside the interpreter, which need not be on PATH (pyenv).
MYPY_GRPC = --plugin=protoc-gen-mypy_grpc=$$($(PYTHON) -c 'import sys, pathlib; print(pathlib.Path(sys.executable).parent / "protoc-gen-mypy_grpc")')

.PHONY: install run test test-real-model proto proto-check lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml client/pyproject.toml
	@command -v bwrap >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq bubblewrap; \
	  else echo "install bubblewrap (Debian/Ubuntu: sudo apt-get install bubblewrap)"; exit 1; fi; }
	@command -v npm >/dev/null || { echo "install Node.js and npm (opencode and buf come from npm)"; exit 1; }
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e ./client -e '.[dev]'
	mkdir -p .tools && npm install --silent --no-audit --no-fund --prefix .tools @bufbuild/buf@$(BUF_VERSION)
	touch $(STAMP)

run: install
	$(PYTHON) -m service.server

test: install
	$(PYTHON) -m pytest -q

# A real model (SmolLM2-135M on llama-cpp-python's server) through the service. The server is
# built once into ~/.cache/rollout-service-build (about 7 minutes on 2 cores), then reused.
test-real-model: install
	ROLLOUT_LLAMA_PYTHON="$$(PYTHON=$(PYTHON) scripts/real_model/install_llama_server.sh | tail -n 1)" \
	  $(PYTHON) -m pytest -q -s -p no:cacheprovider tests/real_model

proto: install
	$(PYTHON) -m grpc_tools.protoc -Iproto --python_out=client --pyi_out=client \
	  --grpc_python_out=client --mypy_grpc_out=client $(MYPY_GRPC) $(PROTO)

# CI fails when the checked-in stubs differ from what `make proto` generates.
proto-check: install
	rm -rf .tools/proto-check && mkdir -p .tools/proto-check
	$(PYTHON) -m grpc_tools.protoc -Iproto --python_out=.tools/proto-check --pyi_out=.tools/proto-check \
	  --grpc_python_out=.tools/proto-check --mypy_grpc_out=.tools/proto-check $(MYPY_GRPC) $(PROTO)
	for f in rollout_pb2.py rollout_pb2.pyi rollout_pb2_grpc.py rollout_pb2_grpc.pyi; do \
	  diff -u client/rollout/v1/$$f .tools/proto-check/rollout/v1/$$f || \
	  { echo "client/rollout/v1/$$f is stale: run make proto"; exit 1; }; done

lint: install proto-check
	$(BUF) lint
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .
	$(PYTHON) -m mypy

bench: install
	$(PYTHON) bench/run.py

clean:
	rm -rf .tools .mypy_cache .ruff_cache .pytest_cache
