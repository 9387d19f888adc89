#!/usr/bin/env bash
# Builds llama.cpp's own llama-lookup, llama-lookahead, llama-speculative-simple, rpc-server and llama-server
# (without its web UI: tests/bench/serve_load.py drives its API) from the same
# llama-cpp-python sdist and with the same CMake flags as the engine's wheel, for side-by-side
# comparisons (tests/bench/lookup_vs_llama_cpp.py). Prints the bin folder; builds once per
# (version, flags) into ~/.cache/specdec-studio/llama-tools-<version>-<flags key>/.
#
#   scripts/build_llama_tools.sh        (about 5 minutes on 2 cores)
#   SPECDEC_TOOLS_NO_BUILD=1 scripts/build_llama_tools.sh    print the folder only if already built
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/llama_source.sh
source scripts/llama_source.sh
# the newest target last: a build made before it was added gets it on the next run
readonly TARGETS=(llama-lookup llama-lookahead llama-speculative-simple ggml-rpc-server llama-server)

root=$(llama_build_root llama-tools)
if [[ ! -x "$root/build/bin/${TARGETS[-1]}" ]]; then
    [[ -n "${SPECDEC_TOOLS_NO_BUILD:-}" ]] && exit 1
    llama_source "$root"
    # shellcheck disable=SC2086  # the flags are a list of words
    cmake -S "$root/src" -B "$root/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_EXAMPLES=ON \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_CURL=OFF -DGGML_RPC=ON $CMAKE_FLAGS >&2
    cmake --build "$root/build" -j "$(nproc)" --target "${TARGETS[@]}" >&2
fi
echo "$root/build/bin"
