#!/usr/bin/env bash
# Build llama.cpp's llama-server (static, CPU, no web UI download) from the llama.cpp sources
# vendored in the llama-cpp-python sdist on PyPI. Cached by version under $BC_CACHE.
#   lab/build-llama-server.sh            -> prints the path of the cached binary
set -euo pipefail
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE="${BC_CACHE:-/var/cache/benchmark-cycle}"
OUT="$CACHE/llama-server-$VERSION"
if [ -x "$OUT/llama-server" ]; then echo "$OUT/llama-server"; exit 0; fi
SRC="$CACHE/src"
mkdir -p "$SRC" "$OUT"
if [ ! -d "$SRC/llama_cpp_python-$VERSION" ]; then
  python3 -m pip download -q --no-deps --no-binary=:all: -d "$SRC" "llama-cpp-python==$VERSION" >&2
  tar -C "$SRC" -xzf "$SRC/llama_cpp_python-$VERSION.tar.gz"
fi
L="$SRC/llama_cpp_python-$VERSION/vendor/llama.cpp"
cmake -S "$L" -B "$L/build-bc" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_SERVER=ON >&2
cmake --build "$L/build-bc" --target llama-server -j "$(nproc)" >&2
install -m 0755 "$L/build-bc/bin/llama-server" "$OUT/llama-server.tmp"
mv "$OUT/llama-server.tmp" "$OUT/llama-server"
echo "$OUT/llama-server"
