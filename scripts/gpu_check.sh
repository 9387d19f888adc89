#!/usr/bin/env bash
# The GPU check: what the techniques buy where a decode of B tokens costs about one token's time.
#
#   scripts/gpu_check.sh            (on a machine with an NVIDIA GPU, the CUDA toolkit and PyPI)
#
# Builds llama-cpp-python with CUDA into its own virtual environment (.venv-gpu; the CPU set-up's
# .venv is left alone), fetches both models, measures the batch-cost profile of each with every
# layer offloaded, and runs the Auto bench (Auto and prompt lookup against plain, every category)
# and the lookahead bench on the GPU, then the coder pair (Qwen2.5-Coder 1.5B drafted by 0.5B, 1.6 GB:
# profiles, plain, speculative k = 3 and 5, Auto with the draft); then prints one table. Never part of CI. The build compiles
# for the GPU in the machine only (CMAKE_CUDA_ARCHITECTURES=native) to stay within a few minutes
# on 16 cores; the whole check is meant to take under 8 minutes once the CUDA toolkit is there.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly VENV=.venv-gpu
readonly LLAMA_VERSION=0.3.36
readonly OUT=${GPU_CHECK_OUT:-gpu-check}
readonly LAYERS=999  # every layer
mkdir -p "$OUT"
log() { printf '[gpu-check %s] %s\n' "$(date +%T)" "$*" >&2; }

command -v nvidia-smi >/dev/null || { echo "gpu_check: no nvidia-smi here: this script needs an NVIDIA GPU" >&2; exit 2; }
command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || {
    echo "gpu_check: no nvcc: install the CUDA toolkit (llama.cpp's CUDA backend is compiled here)" >&2; exit 2; }
export PATH="$PATH:/usr/local/cuda/bin"

if [[ ! -x $VENV/bin/python ]]; then
    log "creating $VENV"
    python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import llama_cpp, sys; sys.exit(not llama_cpp.llama_supports_gpu_offload())" 2>/dev/null; then
    log "building llama-cpp-python $LLAMA_VERSION with CUDA (once)"
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=native" \
        CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        "$VENV/bin/pip" install -q --no-cache-dir --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_VERSION"
fi
# the engine only: the benches and the CLI need no Qt
"$VENV/bin/pip" install -q "numpy==2.4.6" "platformdirs==4.12.2" "gguf==0.19.0"
"$VENV/bin/pip" install -q --no-deps -e .
"$VENV/bin/specdec" models fetch default >&2
"$VENV/bin/specdec" models fetch gemma >&2
"$VENV/bin/specdec" models fetch coder coder-draft >&2

log "GPU: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader)"
for model in default gemma coder coder-draft; do
    log "profile of $model, every layer offloaded"
    "$VENV/bin/specdec" profile -m "$model" -ngl "$LAYERS" --json > "$OUT/profile-$model.json"
done
export SPECDEC_BENCH_GPU_LAYERS=$LAYERS SPECDEC_BENCH_THREADS=${SPECDEC_BENCH_THREADS:-4}
log "Auto and prompt lookup against plain, every category"
"$VENV/bin/python" tests/bench/auto.py -n 128 --rounds 1 > "$OUT/auto.txt"
log "lookahead against plain"
"$VENV/bin/python" tests/bench/lookahead.py 128 > "$OUT/lookahead.txt"
log "the coder pair: plain, speculative k = 3 and 5, Auto with its draft"
pair_run() {  # label, then run flags; one line of the pair's table
    "$VENV/bin/specdec" run -m coder -md coder-draft -ngl "$LAYERS" -t "$SPECDEC_BENCH_THREADS" -n 128 --temp 0 \
        -f tests/bench/pair_prompt.txt --chat --json --baseline "${@:2}" > "$OUT/pair-$1.json"
}
pair_run k3 --mode speculative -k 3
pair_run k5 --mode speculative -k 5
pair_run auto --mode auto

"$VENV/bin/python" - "$OUT" <<'EOF'
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
print("batch-cost profile, every layer on the GPU: T(B)/T(1), every row's logits")
print(f"{'model':<10}{'T(1) ms':>9}" + "".join(f"{'B=' + str(b):>7}" for b in (2, 4, 8, 16, 32, 64)))
for model in ("default", "gemma", "coder", "coder-draft"):
    c = json.loads((out / f"profile-{model}.json").read_text())["target"]
    rel = dict(zip(c["sizes"], c["relative_all_logits"]))
    print(f"{model:<10}{1e3 * c['t_all_logits_s'][0]:9.2f}" + "".join(f"{rel[b]:7.2f}" for b in (2, 4, 8, 16, 32, 64)))
print()
print((out / "auto.txt").read_text().split("\nthe same")[0].split("\nAuto's decisions")[0])
print((out / "lookahead.txt").read_text())
print("the coder pair (128 tokens, greedy): t/s, plain t/s, predicted and measured speed-up")
for label in ("k3", "k5", "auto"):
    s = json.loads((out / f"pair-{label}.json").read_text())["stats"]
    print(f"{label:<6}{s['tokens_per_second']:8.1f}{s.get('plain_tokens_per_second', 0):8.1f}"
          f"{s.get('predicted_speedup') or 0:8.2f}{s.get('measured_speedup', 0):8.2f}  accept {s['accept_rate']:.2f}")
EOF
