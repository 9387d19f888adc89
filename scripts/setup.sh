#!/usr/bin/env bash
# Creates .venv, installs SpecDec Studio with its pinned dependencies, and fetches models.
#
#   scripts/setup.sh            set up, fetch the embedded default model
#   scripts/setup.sh --all      set up, fetch every model the tests use
#
# llama-cpp-python is compiled from source once per (version, CMake flags) and the wheel is kept in
# ~/.cache/specdec-studio/wheels/ so the next set-up (and CI) reuses it. The flags follow the
# machine's tools (scripts/build_flags.sh: Metal on macOS, CUDA where nvcc is, Vulkan where glslc and
# its headers are, else the CPU; a GPU build that fails falls back to the CPU's), and the set-up says
# which it chose and why. SPECDEC_CMAKE_ARGS overrides them, e.g.
# SPECDEC_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_RPC=ON -DGGML_CUDA=ON".
# Never use -DGGML_NATIVE=ON on CPUs that advertise AMX: llama.cpp's AMX kernels die with SIGILL.
set -euo pipefail

cd "$(dirname "$0")/.."
readonly LLAMA_CPP_PYTHON_VERSION=0.3.36
readonly CACHE_ROOT="${SPECDEC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specdec-studio}"
# shellcheck source=scripts/build_flags.sh
source scripts/build_flags.sh
# GGML_RPC (in every choice): llama.cpp's RPC backend, for models whose layers live on other machines (--rpc)
choose_build_flags
echo "llama.cpp build: $BUILD_REASON ($BUILD_FLAGS)"
PYTHON="${PYTHON:-python3}"

fetch_all=0
[[ "${1:-}" == "--all" ]] && fetch_all=1

"$PYTHON" - <<'PY' || { echo "SpecDec Studio needs Python >= 3.11 (set PYTHON=...)." >&2; exit 1; }
import sys
sys.exit(0 if sys.version_info >= (3, 11) else 1)
PY

# Qt's offscreen and xcb platforms need a few system libraries a bare Debian image lacks (and the
# tests, with --all, a headless Chromium).
if command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
    missing=()
    for pkg in libgl1 libegl1 libxkbcommon0 libxkbcommon-x11-0 libfontconfig1 libdbus-1-3 libglib2.0-0 \
               libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-render-util0 \
               libxcb-xkb1 libxcb-shape0 libxcb-randr0; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    # the tests open the exported HTML report in a real browser engine (headless)
    if (( fetch_all )) && ! command -v chromium >/dev/null; then
        missing+=(chromium)
    fi
    # and validate the desktop entry and the AppStream metadata with the freedesktop tools
    if (( fetch_all )); then
        command -v desktop-file-validate >/dev/null || missing+=(desktop-file-utils)
        command -v appstreamcli >/dev/null || missing+=(appstream)
    fi
    if (( ${#missing[@]} )); then
        echo "installing system packages: ${missing[*]}"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${missing[@]}" >/dev/null
    fi
fi

# wheel_dir FLAGS: where the wheel built with FLAGS is kept
wheel_dir() {
    printf '%s/wheels/llama-cpp-python-%s-%s' "$CACHE_ROOT" "$LLAMA_CPP_PYTHON_VERSION" "$(flags_key "$1")"
}

has_wheel() {
    ls "$(wheel_dir "$BUILD_FLAGS")"/llama_cpp_python-*.whl >/dev/null 2>&1
}

# build_wheel FLAGS: llama-cpp-python compiled with FLAGS into its wheel folder
build_wheel() {
    local flags="$1" dir
    dir=$(wheel_dir "$flags")
    echo "building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION with CMAKE_ARGS='$flags' (about 5-10 minutes, once)"
    mkdir -p "$dir"
    printf '%s\n' "$flags" > "$dir/CMAKE_ARGS"
    # --no-cache-dir: pip's own wheel cache is keyed by the sdist alone and would hand back a
    # wheel built with other flags
    CMAKE_ARGS="$flags" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        .venv/bin/python -m pip wheel -q --no-cache-dir --no-deps --no-binary llama-cpp-python \
        "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -w "$dir"
}

make_environment() {
    [[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
    has_wheel || build_with_fallback build_wheel
    local wheel_dir
    wheel_dir=$(wheel_dir "$BUILD_FLAGS")
    .venv/bin/python -m pip install -q "$wheel_dir"/llama_cpp_python-*.whl
    # again, forced: pip keeps an installed wheel of the same version, even one built with other flags
    .venv/bin/python -m pip install -q --force-reinstall --no-deps "$wheel_dir"/llama_cpp_python-*.whl
    # which wheel this set-up uses: scripts/package.sh installs the same one into the packaging venv
    ls "$wheel_dir"/llama_cpp_python-*.whl | tail -n 1 > .venv/llama-cpp-python-wheel
    .venv/bin/python -m pip install -q -e ".[test]"
}

# A stamp of what the environment was made from (this script, the dependencies, the build flags,
# the Python): while it holds, `make run` and `make test` skip the pip steps (about half a minute)
# and only check the models. A change to any of them, or a missing .venv, sets up again.
stamp_key() {
    cat "$0" scripts/build_flags.sh pyproject.toml <(printf '%s\n' "$BUILD_FLAGS" "$("$PYTHON" --version 2>&1)") \
        | sha256sum | cut -c1-16
}
if [[ -x .venv/bin/specdec && -f .venv/setup-stamp && "$(cat .venv/setup-stamp)" == "$(stamp_key)" ]] && has_wheel; then
    echo "set-up is current (.venv/setup-stamp); checking the models"
else
    rm -f .venv/setup-stamp
    make_environment
    stamp_key > .venv/setup-stamp  # the flags that built (a failed GPU build's fallback's)
fi

if (( fetch_all )); then
    .venv/bin/specdec models fetch all
    # llama.cpp's tiny random model of every architecture (tests/engine/test_archs.py): built once
    # per llama.cpp version and flags, about 5 minutes, before the tests' clock starts
    scripts/tiny_archs.sh >/dev/null
else
    .venv/bin/specdec models fetch default
fi
