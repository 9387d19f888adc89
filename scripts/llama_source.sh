# Sourced by build_llama_tools.sh and tiny_archs.sh: the llama.cpp sources vendored in the
# llama-cpp-python sdist the engine's wheel is built from, and the cache folder a build of them
# with these CMake flags goes to.
readonly LLAMA_CPP_PYTHON_VERSION=0.3.36
readonly CMAKE_FLAGS="${SPECDEC_CMAKE_ARGS:--DGGML_NATIVE=OFF}"
readonly CACHE_ROOT="${SPECDEC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specdec-studio}"

# llama_build_root NAME: the folder of NAME's build for this version and these flags
llama_build_root() {
    printf '%s/%s-%s-%s' "$CACHE_ROOT" "$1" "$LLAMA_CPP_PYTHON_VERSION" \
        "$(printf '%s' "$CMAKE_FLAGS" | sha256sum | cut -c1-12)"
}

# llama_source ROOT: the vendored llama.cpp unpacked into ROOT/src (once)
llama_source() {
    local root="$1"
    if ! command -v cmake >/dev/null; then  # CMake from PyPI, into the environment (a fresh machine)
        .venv/bin/python -m pip install -q cmake >&2 || { echo "building llama.cpp needs cmake and a C++ compiler" >&2; exit 1; }
        export PATH="$PWD/.venv/bin:$PATH"
    fi
    mkdir -p "$root"
    [[ -d "$root/src" ]] && return
    .venv/bin/python -m pip download -q --no-deps --no-binary :all: \
        "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$root/dl" >&2
    tar -xzf "$root"/dl/llama_cpp_python-*.tar.gz -C "$root"
    mv "$root/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp" "$root/src"
    rm -rf "$root/dl" "$root/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
}
