# Sourced by setup.sh: which CMake flags llama-cpp-python is built with on this machine, and the
# build that falls back to the CPU when a GPU build fails. Kept apart so that a test can ask it with
# fake tools on PATH (tests/packaging/test_build_flags.py); no GPU is needed for that.

readonly CPU_FLAGS="-DGGML_NATIVE=OFF -DGGML_RPC=ON"

# has_vulkan_headers: the Vulkan SDK's or the system's vulkan/vulkan.h (glslc alone does not build)
has_vulkan_headers() {
    local dir
    for dir in "${VULKAN_SDK:+$VULKAN_SDK/include}" /usr/include /usr/local/include; do
        [[ -n "$dir" && -f "$dir/vulkan/vulkan.h" ]] && return 0
    done
    return 1
}

# find_nvcc: the CUDA compiler's path (PATH, else CUDA_HOME's or /usr/local/cuda's), empty if none
find_nvcc() {
    command -v nvcc || { [[ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]] && echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"; } || true
}

# has_nvidia_gpu: the driver lists a GPU (a CUDA toolkit alone, as on a build machine, makes a wheel
# that cannot load without the driver's libcuda)
has_nvidia_gpu() {
    command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'
}

# choose_build_flags: sets BUILD_FLAGS and BUILD_REASON (one sentence) from SPECDEC_CMAKE_ARGS, else
# from the tools this machine has: macOS builds Metal, nvcc with an NVIDIA GPU calls for CUDA, glslc
# with the Vulkan headers for Vulkan; anything else the CPU build. GGML_NATIVE stays OFF: CPUs that advertise AMX
# die with SIGILL in llama.cpp's AMX kernels.
choose_build_flags() {
    if [[ -n "${SPECDEC_CMAKE_ARGS:-}" ]]; then
        BUILD_FLAGS="$SPECDEC_CMAKE_ARGS"
        BUILD_REASON="SPECDEC_CMAKE_ARGS is set"
    elif [[ "$(uname -s)" == Darwin ]]; then
        BUILD_FLAGS="$CPU_FLAGS -DGGML_METAL=ON"
        BUILD_REASON="this is macOS: Metal"
    elif [[ -n "$(find_nvcc)" ]] && has_nvidia_gpu; then
        BUILD_FLAGS="$CPU_FLAGS -DGGML_CUDA=ON"
        BUILD_REASON="found nvcc ($(find_nvcc)) and an NVIDIA GPU: CUDA"
    elif command -v glslc >/dev/null && has_vulkan_headers; then
        BUILD_FLAGS="$CPU_FLAGS -DGGML_VULKAN=ON"
        BUILD_REASON="found glslc and the Vulkan headers: Vulkan"
    elif [[ -n "$(find_nvcc)" ]]; then
        BUILD_FLAGS="$CPU_FLAGS"
        BUILD_REASON="found nvcc ($(find_nvcc)) but no NVIDIA GPU (nvidia-smi lists none): the CPU build"
    else
        BUILD_FLAGS="$CPU_FLAGS"
        BUILD_REASON="no CUDA, Vulkan or Metal tools found: the CPU build"
    fi
    if is_gpu_choice && [[ -f "$(failed_mark "$BUILD_FLAGS")" ]]; then
        BUILD_REASON="$BUILD_REASON, but that build failed on an earlier set-up: the CPU build (delete $(failed_mark "$BUILD_FLAGS") to try it again)"
        BUILD_FLAGS="$CPU_FLAGS"
    fi
}

# flags_key FLAGS: the wheel cache's key for a build with FLAGS
flags_key() {
    printf '%s' "$1" | sha256sum | cut -c1-12
}

# failed_mark FLAGS: the file that says a GPU build with FLAGS failed here
failed_mark() {
    printf '%s/wheels/gpu-build-failed-%s' "$CACHE_ROOT" "$(flags_key "$1")"
}

# is_gpu_choice: BUILD_FLAGS are a GPU build this script chose (not the user's own flags)
is_gpu_choice() {
    [[ "$BUILD_FLAGS" != "$CPU_FLAGS" && -z "${SPECDEC_CMAKE_ARGS:-}" ]]
}

# build_with_fallback BUILD_FN: runs "BUILD_FN FLAGS" with BUILD_FLAGS; where a GPU build this script
# chose fails, marks its flags failed (the next set-up does not spend its minutes on them again),
# says so in one sentence and builds for the CPU, leaving BUILD_FLAGS the flags that built.
build_with_fallback() {
    local build_fn="$1"
    "$build_fn" "$BUILD_FLAGS" && return 0
    is_gpu_choice || return 1
    mkdir -p "$CACHE_ROOT/wheels" && : > "$(failed_mark "$BUILD_FLAGS")"
    echo "the GPU build ($BUILD_FLAGS) failed; building for the CPU instead (SPECDEC_CMAKE_ARGS chooses the flags)" >&2
    BUILD_FLAGS="$CPU_FLAGS"
    "$build_fn" "$BUILD_FLAGS"
}
