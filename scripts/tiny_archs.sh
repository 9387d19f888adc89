#!/usr/bin/env bash
# Writes llama.cpp's tiny random model of every architecture it knows (its test-llama-archs, built
# from the same llama-cpp-python sdist and CMake flags as the engine's wheel) into a folder, once
# per (version, flags); prints the folder. tests/engine/test_archs.py runs every mode on them.
#
#   scripts/tiny_archs.sh            (builds test-llama-archs first: about 5 minutes on 2 cores)
#   SPECDEC_TOOLS_NO_BUILD=1 scripts/tiny_archs.sh    print the folder only if already written
set -euo pipefail

cd "$(dirname "$0")/.."
readonly LLAMA_CPP_PYTHON_VERSION=0.3.36
readonly CMAKE_FLAGS="${SPECDEC_CMAKE_ARGS:--DGGML_NATIVE=OFF}"
readonly CACHE_ROOT="${SPECDEC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specdec-studio}"

flags_key=$(printf '%s' "$CMAKE_FLAGS" | sha256sum | cut -c1-12)
root="$CACHE_ROOT/llama-archs-$LLAMA_CPP_PYTHON_VERSION-$flags_key"
models="$root/models"
if [[ ! -f "$models/.complete" ]]; then
    [[ -n "${SPECDEC_TOOLS_NO_BUILD:-}" ]] && exit 1
    command -v cmake >/dev/null || { echo "building llama.cpp's test-llama-archs needs cmake and a C++ compiler" >&2; exit 1; }
    mkdir -p "$root"
    if [[ ! -d "$root/src" ]]; then
        .venv/bin/python -m pip download -q --no-deps --no-binary :all: \
            "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$root/dl" >&2
        tar -xzf "$root"/dl/llama_cpp_python-*.tar.gz -C "$root"
        mv "$root/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp" "$root/src"
        rm -rf "$root/dl" "$root/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
    fi
    # shellcheck disable=SC2086  # the flags are a list of words
    cmake -S "$root/src" -B "$root/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=ON \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF $CMAKE_FLAGS >&2
    cmake --build "$root/build" -j "$(nproc)" --target test-llama-archs >&2
    rm -rf "$models" && mkdir -p "$models"
    "$root/build/bin/test-llama-archs" -o "$models" >&2
    touch "$models/.complete"
fi
echo "$models"
