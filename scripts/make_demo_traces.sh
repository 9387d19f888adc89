#!/usr/bin/env bash
# Record the demo traces shipped in resources/traces/ with the default model (SmolLM2-135M Q4_1),
# so the app's demo works before any model is fetched. Run with nothing else on the machine: the
# traces keep the measured timings, and a replay shows them as recorded.
set -euo pipefail
cd "$(dirname "$0")/.."
out=resources/traces
mkdir -p "$out"
code='def fibonacci(n):
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)


def factorial(n):
    if n < 2:
        return 1
    return n * factorial(n - 1)


def '
common=(-m default -c 1024 -t 2 --color)
.venv/bin/specdec run "${common[@]}" --mode lookahead -W 5 -N 3 -G 5 -n 96 -p "$code" \
    --trace "$out/lookahead_on_python_code.jsonl"
.venv/bin/specdec run "${common[@]}" --mode lookup -k 4 -n 96 -p "$code" \
    --trace "$out/prompt_lookup_on_python_code.jsonl"
.venv/bin/specdec run "${common[@]}" --mode speculative -md default-q8_0 -k 4 -n 64 --chat \
    -p "Explain in three sentences why the sky is blue." \
    --trace "$out/draft_model_on_a_chat_answer.jsonl"
ls -l "$out"
