#!/usr/bin/env python3
"""gpt_prepare streams: under a memory limit smaller than the corpus's tokens, it writes the
same shards as a reference encoding of the corpus.

The corpus is generated from a pool of distinct documents, each repeated many times, so that
the reference needs only the pool's tokens: gpt_prepare encodes the small pool without a limit,
and this script composes the shards the whole corpus must give (the split and shard rules of
docs/formats.md, written again here). Four runs, each under `ulimit -v`:
  1. JSON Lines, --val-fraction (the tokens wait in scratch files until the split is known);
  2. the same file, --val-tokens (shards written as they fill);
  3. one text file larger than the limit: one document, read and encoded a piece at a time;
  4. the same, --val-tokens: the one document is split inside, at exactly that many tokens.

usage: prepare_bounded_memory.py --prepare BIN --tokenizer DIR --out DIR [--limit-mb N] [--no-limit]
(--no-limit: the same runs without ulimit, for a gpt_prepare built with AddressSanitizer, which
reserves terabytes of address space)
"""
import argparse
import hashlib
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import time

EOT = 50256
HEADER_BYTES = 1024


def generate_pool(count, seed):
    """Distinct documents of varied lengths: words, numbers, punctuation, contractions, accents,
    emoji (a surrogate pair in JSON), several spaces, tabs, newlines and blank lines."""
    rng = random.Random(seed)
    words = ["the", "jury", "said", "it's", "they'll", "we've", "Atlanta's", "election", "42", "3.14", "1,000,000",
             "naïve", "café", "Zürich", "日本語", "😀", "—", "(note)", "\"quoted\"", "e-mail", "HTTP/1.1", "x" * 40]
    pool = []
    for d in range(count):
        parts = []
        for _ in range(rng.randint(30, 3000)):
            parts.append(rng.choice(words))
            parts.append(rng.choice([" ", " ", " ", " ", "  ", "\t", "\n", "\n\n", ", ", ". "]))
        pool.append(f"Document {d}.\n" + "".join(parts).strip() + "\n")
    return pool


def run(cmd, limit_kb=None):
    """Runs cmd (under `ulimit -v limit_kb`, if given); fails the test with its output if it fails.

    ulimit -v limits address space, not memory, and glibc reserves 64 MB of address space for
    each thread's own malloc arena; under a tight limit the reservations fail and every thread
    retries them, slowly. MALLOC_ARENA_MAX=1 (one arena for all threads) keeps the limit about
    the memory gpt_prepare uses."""
    env = dict(os.environ)
    if limit_kb:
        cmd = ["bash", "-c", f'ulimit -v {limit_kb} && exec "$@"', "bash"] + cmd
        env["MALLOC_ARENA_MAX"] = "1"
    started = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"FAILED ({p.returncode}): {' '.join(cmd)}\n{p.stdout}")
    print(f"  ({time.time() - started:.1f} s) {p.stdout.strip().splitlines()[-1]}")
    return p.stdout


def read_tokens(path):
    with open(path, "rb") as f:
        header = struct.unpack("<3i", f.read(12))
        f.seek(HEADER_BYTES)
        data = f.read()
    assert header[0] == 20240520 and header[1] == 1 and len(data) == 2 * header[2], path
    return data


def pool_tokens(args, pool, work):
    """Each pool document's tokens, <|endoftext|> first, as uint16 bytes: gpt_prepare on the
    small pool (one shard, no limit), cut at the <|endoftext|> that starts each document."""
    path = os.path.join(work, "pool.jsonl")
    with open(path, "w") as f:
        for text in pool:
            f.write(json.dumps({"text": text}) + "\n")
    out = os.path.join(work, "pool_shards")
    run([args.prepare, "--tokenizer", args.tokenizer, "--out", out, "--val-fraction", "0", "--min-shard-tokens",
         "1", path])
    data = read_tokens(os.path.join(out, "pool_train_000000.bin"))
    ids = struct.unpack(f"<{len(data) // 2}H", data)
    starts = [i for i, t in enumerate(ids) if t == EOT] + [len(ids)]
    assert len(starts) == len(pool) + 1, "a pool document holds an <|endoftext|> token"
    return [data[2 * a:2 * b] for a, b in zip(starts, starts[1:])]


def shard_sizes(total, max_tokens, min_tokens):
    sizes = []
    left = total
    while left > 0:
        sizes.append(min(left, max_tokens))
        left -= sizes[-1]
    if len(sizes) > 1 and sizes[-1] < min_tokens:
        sizes[-2] += sizes.pop()
    return sizes


def expected_shards(docs, val_end, max_tokens, min_tokens):
    """sha256 of each shard the documents (uint16 bytes each) must give: {file suffix: digest}."""
    total = sum(len(d) for d in docs) // 2
    cuts = []  # (split, index, first token, end token)
    for split, begin, end in (("val", 0, val_end), ("train", val_end, total)):
        at = begin
        for i, size in enumerate(shard_sizes(end - begin, max_tokens, min_tokens)):
            cuts.append((split, i, at, at + size))
            at += size
    digests = {}
    stream, offset = iter(docs), 0  # the document being consumed, and the bytes of it used
    doc = b""
    for split, index, begin, end in cuts:
        h = hashlib.sha256()
        h.update(struct.pack("<3i", 20240520, 1, end - begin) + bytes(HEADER_BYTES - 12))
        need = 2 * (end - begin)
        while need > 0:
            if offset == len(doc):
                doc, offset = next(stream), 0
            take = min(need, len(doc) - offset)
            h.update(doc[offset:offset + take])
            offset += take
            need -= take
        digests[f"{split}_{index:06d}.bin"] = h.hexdigest()
    return digests


def val_end_by_fraction(doc_lengths, fraction):
    """gpt_prepare's split: the first documents until they reach ceil(fraction * total) tokens;
    inside the last document if that takes them all."""
    total = sum(doc_lengths)
    target = math.ceil(fraction * total)
    end = docs = 0
    while end < target and docs < len(doc_lengths):
        end += doc_lengths[docs]
        docs += 1
    return target if target > 0 and docs == len(doc_lengths) else end


def val_end_by_tokens(doc_lengths, n):
    end = 0
    for length in doc_lengths:
        if end >= n:
            break
        end += length
    return end


def check(out_dir, name, digests):
    found = sorted(f for f in os.listdir(out_dir) if f.endswith(".bin"))
    want = sorted(f"{name}_{k}" for k in digests)
    if found != want:
        sys.exit(f"FAILED: {out_dir} holds {found}, expected {want}")
    for suffix, digest in digests.items():
        with open(os.path.join(out_dir, f"{name}_{suffix}"), "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != digest:
                sys.exit(f"FAILED: {name}_{suffix} differs from the reference encoding")
    print(f"  ok: {len(found)} shards as the reference")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prepare", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--limit-mb", type=int, default=72)
    ap.add_argument("--no-limit", action="store_true")
    args = ap.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    limit_kb = None if args.no_limit else args.limit_mb * 1024
    # The corpus's tokens alone take more than the limit: 2 bytes each, a quarter more.
    min_tokens = int(1.25 * args.limit_mb * 2**20 / 2)
    shard_tokens = 2_000_000

    pool = generate_pool(24, seed=20261127)
    tokens = pool_tokens(args, pool, args.out)
    rng = random.Random(1)
    order, total = [], 0
    while total < min_tokens:
        order.append(rng.randrange(len(pool)))
        total += len(tokens[order[-1]]) // 2
    docs = [tokens[k] for k in order]
    lengths = [len(d) // 2 for d in docs]
    corpus = os.path.join(args.out, "corpus.jsonl")
    with open(corpus, "w") as f:
        for k in order:
            f.write(json.dumps({"id": k, "text": pool[k]}) + "\n")
    print(f"corpus: {len(order):,} documents, {total:,} tokens ({2 * total / 2**20:.0f} MB of tokens, "
          f"{os.path.getsize(corpus) / 2**20:.0f} MB of JSON Lines); "
          + ("no limit (--no-limit)" if args.no_limit else f"limit ulimit -v {args.limit_mb} MB"))

    common = [args.prepare, "--tokenizer", args.tokenizer, "--threads", "2", "--shard-tokens", str(shard_tokens)]
    print("1. JSON Lines, --val-fraction 0.12")
    out = os.path.join(args.out, "by_fraction")
    run(common + ["--out", out, corpus], limit_kb)
    check(out, "corpus", expected_shards(docs, val_end_by_fraction(lengths, 0.12), shard_tokens, 16385))

    print("2. JSON Lines, --val-tokens 3000000")
    out = os.path.join(args.out, "by_tokens")
    run(common + ["--out", out, "--val-tokens", "3000000", corpus], limit_kb)
    check(out, "corpus", expected_shards(docs, val_end_by_tokens(lengths, 3_000_000), shard_tokens, 16385))
    os.remove(corpus)
    shutil.rmtree(os.path.join(args.out, "by_fraction"))
    shutil.rmtree(os.path.join(args.out, "by_tokens"))

    # Pool documents end in "\n" after a character that is not a space, and begin with
    # "Document": the pre-tokenizer never joins the two sides of a joint into one piece, so the
    # text's tokens are the documents' tokens without their <|endoftext|>, one after the other.
    print("3. one text file, --val-fraction 0.1")
    text = os.path.join(args.out, "book.txt")
    with open(text, "w") as f:
        for k in order:
            f.write(pool[k])
    body = [tokens[k][2:] for k in order]
    book = [struct.pack("<H", EOT)] + body
    out = os.path.join(args.out, "book")
    run(common + ["--out", out, "--val-fraction", "0.1", text], limit_kb)
    check(out, "book", expected_shards(book, val_end_by_fraction([sum(len(b) for b in book) // 2], 0.1),
                                       shard_tokens, 16385))

    print("4. the same text file, --val-tokens 3000000 (one document: split inside it)")
    out = os.path.join(args.out, "book_by_tokens")
    run(common + ["--out", out, "--val-tokens", "3000000", text], limit_kb)
    check(out, "book", expected_shards(book, 3_000_000, shard_tokens, 16385))
    shutil.rmtree(args.out)
    print("ok: gpt_prepare streamed every corpus" + ("" if args.no_limit else " within the limit"))


if __name__ == "__main__":
    main()
