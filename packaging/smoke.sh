#!/usr/bin/env bash
# Smoke test of the frozen bundle (run by `make package`, or by hand):
#
#   packaging/smoke.sh [BUNDLE_DIR]      default: dist/specdec-studio
#
# With an empty model cache and data folder, so the bundle can only use what it embeds:
#   1. the CLI lists the embedded default model;
#   2. the CLI decodes 16 tokens in lookahead mode, with the KV mirror checked against llama.cpp on
#      every decode, and gives the same tokens as plain decoding;
#   3. the GUI starts offscreen on the default model, decodes 8 tokens and shows them (--self-test).
# Needs python3 only to read the CLI's JSON.
set -euo pipefail

bundle=$(cd "${1:-$(dirname "$0")/../dist/specdec-studio}" && pwd)
readonly PROMPT='def fibonacci(n):
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)


def factorial(n):'

scratch=$(mktemp -d)
cleanup() {
    rm -rf "$scratch"
}
trap cleanup EXIT
export SPECDEC_CACHE="$scratch/cache" SPECDEC_MODELS="$scratch/models" SPECDEC_DATA="$scratch/data"
export QT_QPA_PLATFORM=offscreen

fail() { echo "smoke: FAIL: $*" >&2; exit 1; }

echo "smoke: $bundle"
"$bundle/specdec" models list --json > "$scratch/models.json"
python3 - "$scratch/models.json" "$bundle" <<'PY' || fail "the embedded default model is not listed"
import json, sys
rows = json.load(open(sys.argv[1]))
embedded = [r for r in rows if r.get("path", "").startswith(sys.argv[2]) and "error" not in r]
assert embedded and embedded[0]["name"], rows
print(f"smoke: embedded model {embedded[0]['name']} ({embedded[0]['quant']})")
PY

"$bundle/specdec" run -m default --mode plain -n 16 -t 2 -p "$PROMPT" --json > "$scratch/plain.json" \
    || fail "plain decoding through the bundle's CLI failed"
"$bundle/specdec" run -m default --mode lookahead -W 4 -N 3 -G 4 --verify-kv -n 16 -t 2 -p "$PROMPT" --json \
    > "$scratch/lookahead.json" || fail "lookahead decoding through the bundle's CLI failed"
python3 - "$scratch/plain.json" "$scratch/lookahead.json" <<'PY' || fail "lookahead's output is not plain's"
import json, sys
plain, lookahead = (json.load(open(path)) for path in sys.argv[1:])
assert lookahead["config"]["mode"] == "lookahead", lookahead["config"]
assert lookahead["stats"]["n_predict"] == 16, lookahead["stats"]
assert lookahead["token_ids"] == plain["token_ids"], (lookahead["token_ids"], plain["token_ids"])
assert lookahead["text"].strip(), "empty text"
stats = lookahead["stats"]
print(f"smoke: lookahead gave plain's 16 tokens in {stats['steps']} steps "
      f"({stats['n_accept']} accepted from n-grams): {lookahead['text'].strip()[:60]!r}")
PY

# the real window loads the embedded model, decodes 8 tokens, shows them and exits (app/self_test.py)
"$bundle/specdec-studio" --self-test --model default > "$scratch/gui.json" 2> "$scratch/gui.log" \
    || { cat "$scratch/gui.log" >&2; fail "the GUI did not load the model and decode"; }
if grep -q "Traceback" "$scratch/gui.log"; then
    cat "$scratch/gui.log" >&2
    fail "the GUI printed a traceback"
fi
python3 - "$scratch/gui.json" <<'PY' || fail "the GUI's run did not show its tokens"
import json, sys
result = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert result["n_tokens"] == 8 and result["text"].strip() and result["shown"] == result["text"], result
print(f"smoke: the GUI loaded {result['model'].rsplit('/', 1)[-1]} and streamed {result['text'].strip()[:40]!r}")
PY
echo "smoke: ok"
