#!/usr/bin/env bash
# Builds llama.cpp's own llama-lookup, llama-lookahead and llama-speculative-simple from the same
# llama-cpp-python sdist and with the same CMake flags as the engine's wheel, for side-by-side
# comparisons (tests/bench/lookup_vs_llama_cpp.py). Prints the bin folder; builds once per
# (version, flags) into ~/.cache/specdec-studio/llama-tools-<version>-<flags key>/.
#
#   scripts/build_llama_tools.sh        (about 5 minutes on 2 cores)
#   SPECDEC_TOOLS_NO_BUILD=1 scripts/build_llama_tools.sh    print the folder only if already built
set -euo pipefail

cd "$(dirname "$0")/.."
readonly LLAMA_CPP_PYTHON_VERSION=0.3.36
readonly CMAKE_FLAGS="${SPECDEC_CMAKE_ARGS:--DGGML_NATIVE=OFF}"
readonly CACHE_ROOT="${SPECDEC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specdec-studio}"
readonly TARGETS=(llama-lookup llama-lookahead llama-speculative-simple)

flags_key=$(printf '%s' "$CMAKE_FLAGS" | sha256sum | cut -c1-12)
root="$CACHE_ROOT/llama-tools-$LLAMA_CPP_PYTHON_VERSION-$flags_key"
if [[ ! -x "$root/build/bin/${TARGETS[-1]}" ]]; then
    [[ -n "${SPECDEC_TOOLS_NO_BUILD:-}" ]] && exit 1
    command -v cmake >/dev/null || { echo "building llama.cpp's tools needs cmake and a C++ compiler" >&2; exit 1; }
    mkdir -p "$root"
    if [[ ! -d "$root/src" ]]; then
        .venv/bin/python -m pip download -q --no-deps --no-binary :all: \
            "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$root/dl" >&2
        tar -xzf "$root"/dl/llama_cpp_python-*.tar.gz -C "$root"
        mv "$root/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp" "$root/src"
        rm -rf "$root/dl" "$root/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
    fi
    # shellcheck disable=SC2086  # the flags are a list of words
    cmake -S "$root/src" -B "$root/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_EXAMPLES=ON \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF $CMAKE_FLAGS >&2
    cmake --build "$root/build" -j "$(nproc)" --target "${TARGETS[@]}" >&2
fi
echo "$root/build/bin"
