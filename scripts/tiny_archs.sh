#!/usr/bin/env bash
# Writes llama.cpp's tiny random model of every architecture it knows (its test-llama-archs, built
# from the same llama-cpp-python sdist and CMake flags as the engine's wheel) into a folder, once
# per (version, flags), and a qwen35 with an MTP block; prints the folder. tests/engine/test_archs.py runs every mode on them.
#
#   scripts/tiny_archs.sh            (builds test-llama-archs first: about 5 minutes on 2 cores)
#   SPECDEC_TOOLS_NO_BUILD=1 scripts/tiny_archs.sh    print the folder only if already written
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/llama_source.sh
source scripts/llama_source.sh

# test-llama-archs draws its random weights from std::random_device unless given a seed: a fixed one
# makes every machine's models (and so the tests' outcomes on them) the same
readonly SEED=1
root=$(llama_build_root llama-archs)
models="$root/models-seed$SEED"
if [[ ! -f "$models/.complete" ]]; then
    [[ -n "${SPECDEC_TOOLS_NO_BUILD:-}" ]] && exit 1
    llama_source "$root"
    # shellcheck disable=SC2086  # the flags are a list of words
    cmake -S "$root/src" -B "$root/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=ON \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF $CMAKE_FLAGS >&2
    cmake --build "$root/build" -j "$(nproc)" --target test-llama-archs >&2
    rm -rf "$models" && mkdir -p "$models"
    "$root/build/bin/test-llama-archs" -s "$SEED" -o "$models" >&2
    touch "$models/.complete"
fi
# No GGUF with MTP layers is on the registries and test-llama-archs writes none: one is made from
# its qwen35 with an MTP block added (tests/mtp_model.py), beside the others.
if [[ ! -f "$models/qwen35-mtp.gguf" && -z "${SPECDEC_TOOLS_NO_BUILD:-}" ]]; then
    "${SPECDEC_PYTHON:-.venv/bin/python}" -m tests.mtp_model "$models/qwen35-dense.gguf" "$models/qwen35-mtp.gguf" >&2
fi
echo "$models"
