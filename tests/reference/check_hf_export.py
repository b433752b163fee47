#!/usr/bin/env python3
"""Does transformers itself load what gpt_safetensors exported, and give the same logits?

    check_hf_export.py DIR TOKENS LOGITS

DIR: an exported directory (model.safetensors, config.json; vocab.json and merges.txt when it was
exported with the tokenizer). TOKENS: the JSON {"batch": B, "seq": T, "file": NAME} of
make_safetensors_inputs, NAME beside it holding B*T int32 ids. LOGITS: the expected logits, float32,
B*T*V (this project's CPU model's, cpp_logits.bin).

GPT2LMHeadModel.from_pretrained(DIR) runs the tokens in float32 on the CPU; the relative L2 error
of its logits must be within 1e-5 (both sides fp32; see test_safetensors_reference.cpp). When DIR
holds vocab.json, GPT2TokenizerFast.from_pretrained(DIR) must load too, hold V tokens, and encode
and decode a sentence back to itself.

This is the real consumer of the export, but Debian does not package transformers, so it is
optional: exit 77 (CTest: skipped) when transformers or torch cannot be imported, unless
REQUIRE_TRANSFORMERS=1. Exit 0 pass, 1 the logits or the tokenizer differ, 2 bad input.
"""

import json
import os
import sys

PROG = "check_hf_export"
REL_L2 = 1e-5


def skip(reason):
    if os.environ.get("REQUIRE_TRANSFORMERS") == "1":
        print(f"{PROG}: REQUIRE_TRANSFORMERS=1 but {reason}", file=sys.stderr)
        sys.exit(1)
    print(f"{PROG}: skipped: {reason}", file=sys.stderr)
    sys.exit(77)


def main(argv):
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if len(argv) != 3:
        print(f"usage: {PROG}.py DIR TOKENS LOGITS (--help says more)", file=sys.stderr)
        return 2
    directory, tokens_path, logits_path = argv
    try:
        import numpy as np
        import torch
        from transformers import GPT2LMHeadModel
    except ImportError as exc:
        skip(f"cannot import transformers ({exc})")

    try:
        with open(tokens_path, encoding="utf-8") as f:
            meta = json.load(f)
        B, T = meta["batch"], meta["seq"]
        ids = np.fromfile(os.path.join(os.path.dirname(tokens_path), meta["file"]), dtype="<i4")
        expected = np.fromfile(logits_path, dtype="<f4").astype(np.float64)
        model = GPT2LMHeadModel.from_pretrained(directory, torch_dtype=torch.float32)
    except (OSError, ValueError, KeyError) as exc:
        print(f"{PROG}: error: {type(exc).__name__}: {exc}".replace("\n", " "), file=sys.stderr)
        return 2
    if ids.size != B * T:
        print(f"{PROG}: error: {ids.size} token ids, batch {B} x seq {T} needs {B * T}", file=sys.stderr)
        return 2

    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(ids.astype(np.int64).reshape(B, T))).logits
    actual = logits.float().numpy().astype(np.float64).reshape(-1)
    failures = 0
    if actual.size != expected.size:
        print(f"FAIL logits: {actual.size} values, {logits_path} has {expected.size}")
        failures += 1
    else:
        rel = np.linalg.norm(actual - expected) / np.linalg.norm(expected)
        ok = bool(rel <= REL_L2)  # False for NaN
        print(f"{'ok  ' if ok else 'FAIL'} logits of transformers' GPT2LMHeadModel: relative L2 error {rel:.3g} "
              f"(limit {REL_L2})")
        failures += 0 if ok else 1

    if os.path.exists(os.path.join(directory, "vocab.json")):
        from transformers import GPT2TokenizerFast
        tokenizer = GPT2TokenizerFast.from_pretrained(directory)
        text = "The jury said that the election was conducted."
        again = tokenizer.decode(tokenizer.encode(text))
        ok = len(tokenizer) == model.config.vocab_size and again == text
        print(f"{'ok  ' if ok else 'FAIL'} tokenizer: {len(tokenizer)} tokens (V={model.config.vocab_size}), "
              f"round trip {again!r}")
        failures += 0 if ok else 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
