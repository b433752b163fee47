#!/usr/bin/env bash
# Encoding speed of gpt_prepare beside js-tiktoken's, on the same text, on this machine.
#   tests/bench/encode_speed.sh [GPT_PREPARE [TEXT_FILE]]
# Defaults: build/cpu/common/gpt_prepare and data/brown/brown.txt (the Brown corpus as plain
# text, 6 MB). gpt_prepare encodes the file as one document (in pieces, on 1 thread and on all
# cores; its tokens/s include reading the file and writing the shards); js-tiktoken encodes it
# as one string on one thread (its tokens/s count the encoding alone). The ids of both are the
# same (test_tokenizer).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
prepare="${1:-$root/build/cpu/common/gpt_prepare}"
text="${2:-$root/data/brown/brown.txt}"
[[ -x $prepare ]] || { echo "error: $prepare not found; build it: cmake --build build/cpu --target gpt_prepare" >&2; exit 1; }
[[ -f $text ]] || { echo "error: $text not found; cmake --build build/cpu --target data makes the default one" >&2; exit 1; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
echo "text: $text ($(stat -c %s "$text") bytes), $(nproc) cores"
for threads in 1 0; do
  best=""
  for run in 1 2 3; do  # the best of three: the first run also warms the file cache
    line=$("$prepare" --tokenizer "$root/data/gpt2" --out "$out/shards" --val-fraction 0 --min-shard-tokens 1 \
             --threads "$threads" "$text" | grep '^done:')
    speed=$(sed -E 's/.* ([0-9.]+)M tokens\/s$/\1/' <<< "$line")
    if [[ -z $best ]] || awk "BEGIN{exit !($speed > $best)}"; then best=$speed; fi
  done
  echo "gpt_prepare, --threads $threads$([[ $threads == 0 ]] && echo " (all $(nproc) cores)"): ${best}M tokens/s  ($line)"
done
for run in 1 2 3; do
  node "$root/tests/tools/tiktoken_ids.js" "$text" "$out/ids" | sed -E 's/.*\(encoding [0-9.]+ s, ([0-9.]+)M tokens\/s\).*/\1/'
done | sort -g | tail -1 | sed 's/^/js-tiktoken (Node.js, one thread): /; s/$/M tokens\/s/'
