#!/usr/bin/env python3
"""Self-test of the PyTorch reference (plain unittest; run with a Python that has torch).

    /usr/bin/python3 tests/reference/test_gpt2_reference.py

It writes checkpoints and shards with its own writer code (docs/formats.md, including the
FNV-1a checksum), runs gpt2_reference.py as a subprocess, and checks the results against
an independent numpy forward pass and a numpy AdamW step. Exit code 77 when torch is
missing, so that CTest reports the test as skipped.
"""

import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

try:
    import numpy as np
    import torch
except ImportError as exc:
    # CTest maps 77 to "skipped"; REQUIRE_TORCH=1 (CI) makes a missing torch a failure.
    if os.environ.get("REQUIRE_TORCH") == "1":
        print(f"test_gpt2_reference: REQUIRE_TORCH=1 but cannot import torch/numpy ({exc})", file=sys.stderr)
        sys.exit(1)
    print(f"test_gpt2_reference: skipped: cannot import torch/numpy ({exc})", file=sys.stderr)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "gpt2_reference.py")
sys.path.insert(0, HERE)
import gpt2_reference  # noqa: E402  (only for its hash function)
import model  # noqa: E402  (the model alone, tests/reference/model.py)

V = 50257
# A small model with the real vocabulary: quick on a CPU, and its loss at init is ln(V).
SMALL = dict(maxT=16, V=V, L=2, H=2, C=16)


# ----------------------------------------------------------------------------------------
# The writer side of the formats, written again here


def fnv1a(data, h=2166136261):
    for byte in data:
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return h


def layout(cfg):
    maxT, V_, L, C = cfg["maxT"], cfg["V"], cfg["L"], cfg["C"]
    return [("wte", (V_, C)), ("wpe", (maxT, C)),
            ("ln1_w", (L, C)), ("ln1_b", (L, C)), ("qkv_w", (L, 3 * C, C)), ("qkv_b", (L, 3 * C)),
            ("attproj_w", (L, C, C)), ("attproj_b", (L, C)), ("ln2_w", (L, C)), ("ln2_b", (L, C)),
            ("fc_w", (L, 4 * C, C)), ("fc_b", (L, 4 * C)), ("fcproj_w", (L, C, 4 * C)),
            ("fcproj_b", (L, C)), ("lnf_w", (C,)), ("lnf_b", (C,))]


DECAYS = {"wte", "wpe", "qkv_w", "attproj_w", "fc_w", "fcproj_w"}


def split(cfg, flat):
    """Flat array -> {name: array with the layout shape}."""
    out, offset = {}, 0
    for name, shape in layout(cfg):
        n = int(np.prod(shape))
        out[name] = flat[offset: offset + n].reshape(shape)
        offset += n
    assert offset == flat.size
    return out


def make_params(cfg, seed, scheme=True):
    """scheme=True: the init of docs/formats.md. False: larger random values everywhere,
    so that a wrong tensor order or a swapped q/k/v would change the loss."""
    rng = np.random.default_rng(seed)
    parts = []
    for name, shape in layout(cfg):
        if scheme:
            if name in ("attproj_w", "fcproj_w"):
                t = rng.normal(0, 0.02 / math.sqrt(2 * cfg["L"]), shape)
            elif name in DECAYS:
                t = rng.normal(0, 0.02, shape)
            elif name.startswith("ln") and name.endswith("_w"):
                t = np.ones(shape)
            else:
                t = np.zeros(shape)
        else:
            if name.startswith("ln") and name.endswith("_w"):
                t = 1.0 + rng.normal(0, 0.2, shape)
            else:
                t = rng.normal(0, 0.3 if name.endswith("_w") or name in DECAYS else 0.1, shape)
        parts.append(t.astype(np.float32).reshape(-1))
    return np.concatenate(parts)


def write_checkpoint(path, cfg, params, step=0, m=None, v=None, options=None):
    """A version 2 checkpoint, or with `options` (the run's, NUL-separated bytes) a version 3 one."""
    payload = params.astype("<f4").tobytes()
    if m is not None:
        payload += m.astype("<f4").tobytes() + v.astype("<f4").tobytes()
    header = np.zeros(256, dtype="<i4")
    header[:10] = [20261122, 2 if options is None else 3, cfg["maxT"], cfg["V"], cfg["L"], cfg["H"], cfg["C"],
                   step, 1 if m is not None else 0, params.size]
    if options is not None:
        header[41] = len(options)
        payload = options + payload
    # the hash covers the header (its own word 10 still 0) and then the payload
    header[10] = np.array([fnv1a(header.tobytes() + payload)], dtype="<u4").view("<i4")[0]
    with open(path, "wb") as f:
        f.write(header.tobytes() + payload)


def write_shard(path, tokens, magic=20240520, version=1, count=None):
    header = np.zeros(256, dtype="<i4")
    header[:3] = [magic, version, len(tokens) if count is None else count]
    with open(path, "wb") as f:
        f.write(header.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())


def expected_batches(shards, B, T, steps):
    """The loader order of docs/formats.md (rank 0 of world 1), simulated on token lists."""
    shards = [s for s in shards if len(s) >= B * T + 1]  # shorter ones are skipped
    shard, pos, out = 0, 0, []
    for _ in range(steps):
        tokens = shards[shard]
        out.append((tokens[pos: pos + B * T].reshape(B, T), tokens[pos + 1: pos + B * T + 1].reshape(B, T)))
        pos += B * T
        if pos + B * T + 1 > len(tokens):
            shard, pos = (shard + 1) % len(shards), 0
    return out


# ----------------------------------------------------------------------------------------
# An independent forward pass and AdamW step in numpy (float64)


def np_layernorm(x, w, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * w + b


def np_loss(cfg, flat, x, y):
    P = {k: v.astype(np.float64) for k, v in split(cfg, flat).items()}
    B, T = x.shape
    C, H = cfg["C"], cfg["H"]
    Q = C // H
    h = P["wte"][x] + P["wpe"][:T]
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    for l in range(cfg["L"]):
        a = np_layernorm(h, P["ln1_w"][l], P["ln1_b"][l])
        qkv = a @ P["qkv_w"][l].T + P["qkv_b"][l]
        att = np.zeros((B, T, C))
        for head in range(H):
            q = qkv[:, :, head * Q:(head + 1) * Q]
            k = qkv[:, :, C + head * Q: C + (head + 1) * Q]
            v = qkv[:, :, 2 * C + head * Q: 2 * C + (head + 1) * Q]
            s = q @ k.transpose(0, 2, 1) / math.sqrt(Q)
            s[:, future] = -np.inf
            p = np.exp(s - s.max(-1, keepdims=True))
            att[:, :, head * Q:(head + 1) * Q] = (p / p.sum(-1, keepdims=True)) @ v
        h = h + att @ P["attproj_w"][l].T + P["attproj_b"][l]
        a = np_layernorm(h, P["ln2_w"][l], P["ln2_b"][l])
        f = a @ P["fc_w"][l].T + P["fc_b"][l]
        f = 0.5 * f * (1 + np.tanh(math.sqrt(2 / math.pi) * (f + 0.044715 * f ** 3)))
        h = h + f @ P["fcproj_w"][l].T + P["fcproj_b"][l]
    h = np_layernorm(h, P["lnf_w"], P["lnf_b"])
    logits = h @ P["wte"].T
    top = logits.max(-1, keepdims=True)
    lse = np.log(np.exp(logits - top).sum(-1)) + top[..., 0]
    return float(np.mean(lse - np.take_along_axis(logits, y[..., None], -1)[..., 0]))


def np_adamw(cfg, p, g, m, v, t, lr, wd, b1, b2, eps, clip, norm):
    """One AdamW step of docs/formats.md on flat float64 arrays."""
    scale = min(1.0, clip / (norm + 1e-6)) if clip > 0 else 1.0
    g = g * scale
    decay = np.concatenate([np.full(int(np.prod(s)), wd if n in DECAYS else 0.0) for n, s in layout(cfg)])
    p = p * (1 - lr * decay)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    return p - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)


def lr_at(step, steps, lr, warmup, min_frac):
    floor = lr * min_frac
    if step < warmup:
        return lr * (step + 1) / warmup
    return floor + 0.5 * (lr - floor) * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


# ----------------------------------------------------------------------------------------


class ReferenceTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name
        self.rng = np.random.default_rng(1234)

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def run_ref(self, *args, expect=0):
        proc = subprocess.run([sys.executable, REFERENCE, *map(str, args)],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != expect:
            self.fail(f"exit {proc.returncode} (expected {expect}) for {args}\n"
                      f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        return proc

    def train(self, ckpt, data, *extra, B=2, T=8, steps=1):
        out = self.path("out.json")
        self.run_ref("--checkpoint", ckpt, "--data", data, "--batch", B, "--seq", T, "--steps", steps,
                     "--out", out, *extra)
        with open(out) as f:
            return json.load(f)

    def small_setup(self, seed=0, scheme=False, n_tokens=2000):
        params = make_params(SMALL, seed, scheme=scheme)
        ckpt = self.path(f"small_{seed}.ckpt")
        write_checkpoint(ckpt, SMALL, params)
        tokens = self.rng.integers(0, V, n_tokens).astype(np.uint16)
        shard = self.path("one_train_000.bin")
        write_shard(shard, tokens)
        return params, ckpt, shard, tokens

    def read_f32(self, path, n):
        data = np.fromfile(path, dtype="<f4")
        self.assertEqual(data.size, n, f"{path}: {data.size} floats, expected {n}")
        return data

    # -- tests -------------------------------------------------------------------------

    def test_fnv1a_fast_matches_definition(self):
        self.assertEqual(gpt2_reference.fnv1a32(np.frombuffer(b"", np.uint8)), 0x811C9DC5)
        self.assertEqual(gpt2_reference.fnv1a32(np.frombuffer(b"a", np.uint8)), 0xE40C292C)
        self.assertEqual(gpt2_reference.fnv1a32(np.frombuffer(b"foobar", np.uint8)), 0xBF9CF968)
        for n in (1, 7, 1000, (1 << 18) - 1, (1 << 18) + 3, 3 << 17):
            data = self.rng.integers(0, 256, n, dtype=np.uint8)
            self.assertEqual(gpt2_reference.fnv1a32(data), fnv1a(data.tobytes()), f"n={n}")
            self.assertEqual(gpt2_reference.fnv1a32(data, chunk=64), fnv1a(data.tobytes()), f"n={n}")

    def test_parameter_round_trip(self):
        params, ckpt, shard, _ = self.small_setup()
        n = params.size
        for pad in (1, 64):
            out_p, out_g = self.path(f"p{pad}.bin"), self.path(f"g{pad}.bin")
            # lr 0: AdamW changes nothing, so the parameters come back bit for bit
            res = self.train(ckpt, shard, "--lr", 0, "--weight-decay", 0, "--vocab-pad", pad,
                             "--params-out", out_p, "--grads-out", out_g)
            np.testing.assert_array_equal(self.read_f32(out_p, n), params)
            grads = self.read_f32(out_g, n)
            self.assertTrue(np.all(np.isfinite(grads)) and np.any(grads != 0))
            exact = float(np.linalg.norm(grads.astype(np.float64)))
            self.assertLess(abs(res["grad_norms"][0] - exact), 1e-6 * exact)
            self.assertEqual(res["config"], dict(SMALL, params=n))
            for key in ("torch_version", "device", "device_name", "settings", "losses", "grad_norms",
                        "lrs", "step_ms", "tokens_per_s_median", "peak_memory_bytes"):
                self.assertIn(key, res)
            self.assertEqual(res["settings"]["padded_vocab"], -(-V // pad) * pad)

    def test_losses_match_numpy_forward_and_loader_order(self):
        params = make_params(SMALL, 5, scheme=False)
        ckpt = self.path("fwd.ckpt")
        write_checkpoint(ckpt, SMALL, params)
        B, T, steps = 2, 8, 6
        data = self.path("data")
        os.mkdir(data)
        shards = [self.rng.integers(0, V, 2 * B * T + 5).astype(np.uint16),  # two batches
                  self.rng.integers(0, V, B * T).astype(np.uint16),          # one token short: skipped
                  self.rng.integers(0, V, B * T + 1).astype(np.uint16)]      # exactly one
        for i, tokens in enumerate(shards):
            write_shard(os.path.join(data, f"x_train_00{i}.bin"), tokens)
        write_shard(os.path.join(data, "x_val_000.bin"), [1, 2, 3], magic=1)  # must not be read
        out = self.path("out.json")
        proc = self.run_ref("--checkpoint", ckpt, "--data", data, "--batch", B, "--seq", T, "--steps", steps,
                            "--lr", 0, "--weight-decay", 0, "--out", out)
        self.assertIn(f"warning: skipping shard {os.path.join(data, 'x_train_001.bin')}: 16 tokens", proc.stdout)
        with open(out) as f:
            res = json.load(f)
        for step, (x, y) in enumerate(expected_batches(shards, B, T, steps)):
            want = np_loss(SMALL, params, x.astype(np.int64), y.astype(np.int64))
            self.assertLess(abs(res["losses"][step] - want), 1e-5 * want, f"step {step}")

    def test_adamw_step_and_schedule(self):
        params, ckpt, shard, tokens = self.small_setup(seed=2)
        out_p, out_g = self.path("p.bin"), self.path("g.bin")
        hp = dict(lr=1e-2, wd=0.5, b1=0.8, b2=0.9, eps=1e-6, clip=0.05)
        res = self.train(ckpt, shard, "--lr", hp["lr"], "--weight-decay", hp["wd"], "--beta1", hp["b1"],
                         "--beta2", hp["b2"], "--eps", hp["eps"], "--grad-clip", hp["clip"],
                         "--warmup", 2, "--min-lr-frac", 0.2, "--params-out", out_p, "--grads-out", out_g,
                         steps=5)
        self.assertGreater(res["grad_norms"][0], hp["clip"], "the test wants clipping to happen")
        for s in range(5):
            self.assertAlmostEqual(res["lrs"][s], lr_at(s, 5, hp["lr"], 2, 0.2), places=15)
        # replay: step 0 in numpy from the written gradients, then compare after one step
        out_p1 = self.path("p1.bin")
        res1 = self.train(ckpt, shard, "--lr", hp["lr"], "--weight-decay", hp["wd"], "--beta1", hp["b1"],
                          "--beta2", hp["b2"], "--eps", hp["eps"], "--grad-clip", hp["clip"],
                          "--params-out", out_p1, steps=1)
        g = self.read_f32(out_g, params.size).astype(np.float64)
        z = np.zeros_like(g)
        want = np_adamw(SMALL, params.astype(np.float64), g, z, z, 1, hp["lr"], hp["wd"], hp["b1"],
                        hp["b2"], hp["eps"], hp["clip"], res1["grad_norms"][0])
        got = self.read_f32(out_p1, params.size)
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)
        self.assertGreater(np.abs(got - params).max(), 5e-3)  # it did move

    def test_resume_uses_optimizer_state_and_step(self):
        params, _, shard, tokens = self.small_setup(seed=3, scheme=False)
        n = params.size
        m = (self.rng.normal(0, 1e-3, n)).astype(np.float32)
        v = (m.astype(np.float64) ** 2 + self.rng.uniform(1e-8, 1e-6, n)).astype(np.float32)
        ckpt = self.path("resume.ckpt")
        # as the trainers write it: version 3, the run's options after the header
        write_checkpoint(ckpt, SMALL, params, step=4, m=m, v=v, options=b"--steps\x006\x00--lr\x000.003\x00")
        out_p, out_g = self.path("p.bin"), self.path("g.bin")
        B, T, steps, lr = 2, 8, 6, 3e-3
        res = self.train(ckpt, shard, "--resume", "--lr", lr, "--params-out", out_p, "--grads-out", out_g,
                         B=B, T=T, steps=steps)
        self.assertEqual(len(res["losses"]), 2)  # steps 4 and 5 of 6
        self.assertAlmostEqual(res["lrs"][0], lr_at(4, steps, lr, 0, 0.1), places=15)
        # the data order continues at batch 4
        x, y = expected_batches([tokens], B, T, 5)[4]
        want_loss = np_loss(SMALL, params, x.astype(np.int64), y.astype(np.int64))
        self.assertLess(abs(res["losses"][0] - want_loss), 1e-5 * want_loss)
        # one step from the checkpoint's moments with AdamW's step count t = 5
        out_p1 = self.path("p1.bin")
        res1 = self.train(ckpt, shard, "--resume", "--lr", lr, "--params-out", out_p1, B=B, T=T, steps=5)
        g = self.read_f32(out_g, n).astype(np.float64)
        want = np_adamw(SMALL, params.astype(np.float64), g, m.astype(np.float64), v.astype(np.float64), 5,
                        lr_at(4, 5, lr, 0, 0.1), 0.1, 0.9, 0.95, 1e-8, 1.0, res1["grad_norms"][0])
        np.testing.assert_allclose(self.read_f32(out_p1, n), want, rtol=0, atol=1e-6)

    def test_loss_at_init_is_ln_vocab(self):
        _, ckpt, shard, _ = self.small_setup(seed=4, scheme=True)
        res = self.train(ckpt, shard, B=4, T=16)
        self.assertLess(abs(res["losses"][0] - math.log(V)), 0.1, res["losses"])

    def test_model_file_alone(self):
        # model.py is usable on its own: no files, only sizes. Its parameters are those of the
        # file layout (wte tied to the output, so counted once), with padding on top.
        cfg = model.GPTConfig(max_seq_len=SMALL["maxT"], vocab_size=V, n_layer=SMALL["L"], n_head=SMALL["H"],
                              n_embd=SMALL["C"])
        n = sum(int(np.prod(shape)) for _, shape in layout(SMALL))
        for padded in (None, V + 47):
            gpt = model.GPT(cfg, padded_vocab=padded)
            extra = (padded - V) * SMALL["C"] if padded else 0
            self.assertEqual(sum(p.numel() for p in gpt.parameters()), n + extra)
            idx = torch.randint(0, V, (2, 5))
            self.assertEqual(tuple(gpt(idx).shape), (2, 5, V))  # padded logits are cut off
            self.assertTrue(torch.isfinite(gpt(idx, idx)))

    def test_overfit_one_batch(self):
        B, T = 2, 8
        params, ckpt, _, _ = self.small_setup(seed=6, scheme=True)
        shard = self.path("tiny_train_000.bin")
        write_shard(shard, self.rng.integers(0, V, B * T + 1))  # every batch is the same one
        res = self.train(ckpt, shard, "--lr", 1e-2, "--warmup", 2, B=B, T=T, steps=30)
        losses = res["losses"]
        self.assertLess(losses[-1], 0.5 * losses[0], losses)
        self.assertLess(np.mean(losses[-5:]), np.mean(losses[5:10]), losses)

    def test_vocab_padding_does_not_change_losses(self):
        params, ckpt, shard, _ = self.small_setup(seed=8, scheme=True)
        runs = {}
        for pad in (1, 64, 128):
            g, p = self.path(f"g{pad}.bin"), self.path(f"p{pad}.bin")
            res = self.train(ckpt, shard, "--lr", 3e-3, "--vocab-pad", pad, "--grads-out", g,
                             "--params-out", p, steps=6)
            runs[pad] = (res, self.read_f32(g, params.size), self.read_f32(p, params.size))
        base, g1, p1 = runs[1]
        for pad in (64, 128):
            res, g, p = runs[pad]
            for a, b in zip(res["losses"], base["losses"]):
                self.assertLess(abs(a - b), 1e-5 * abs(b), f"pad {pad}: {res['losses']} vs {base['losses']}")
            np.testing.assert_allclose(g, g1, rtol=0, atol=1e-6)
            np.testing.assert_allclose(p, p1, rtol=0, atol=1e-5)

    def assert_one_line_error(self, args, *words):
        proc = self.run_ref(*args, expect=2)
        lines = proc.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        for word in words:
            self.assertIn(word, lines[0])

    def test_corrupt_checkpoints(self):
        params, ckpt, shard, _ = self.small_setup()
        with open(ckpt, "rb") as f:
            good = bytearray(f.read())
        bad = self.path("bad.ckpt")
        common = ["--checkpoint", bad, "--data", shard, "--batch", 2, "--seq", 8, "--steps", 1]

        def check(data, *words):
            with open(bad, "wb") as f:
                f.write(data)
            self.assert_one_line_error(common, *words)

        magic = bytearray(good)
        magic[0] ^= 0xFF
        check(magic, "bad magic")
        flipped = bytearray(good)
        flipped[1024 + 4 * 12345 + 2] ^= 0x10
        check(flipped, "checksum")
        step = bytearray(good)
        step[4 * 7] ^= 0x01  # the step count: the hash covers the header too
        check(step, "checksum")
        check(good[:-4], "size")
        version = bytearray(good)
        version[4] = 7
        check(version, "version")
        os.remove(bad)
        self.assert_one_line_error(common, "missing")
        self.assert_one_line_error(["--checkpoint", ckpt, "--data", shard, "--resume"], "optimizer state")
        self.assert_one_line_error(["--checkpoint", ckpt, "--data", shard, "--seq", 17], "maxT")

    def test_bad_shards(self):
        _, ckpt, _, _ = self.small_setup()
        tokens = self.rng.integers(0, V, 100)
        bad = self.path("bad_train_000.bin")
        common = ["--checkpoint", ckpt, "--data", bad, "--batch", 2, "--seq", 8, "--steps", 1]
        cases = [
            (dict(magic=20240521), "bad magic"),
            (dict(version=2), "version"),
            (dict(count=101), "size"),
        ]
        for kw, word in cases:
            write_shard(bad, tokens, **kw)
            self.assert_one_line_error(common, word)
        write_shard(bad, tokens[:16])  # a batch needs B*T + 1 = 17 tokens
        self.assert_one_line_error(common, "needs 17")
        short_dir = self.path("short")  # every shard too short: the error names the largest
        os.mkdir(short_dir)
        write_shard(os.path.join(short_dir, "s_train_000.bin"), tokens[:10])
        write_shard(os.path.join(short_dir, "s_train_001.bin"), tokens[:16])
        self.assert_one_line_error(["--checkpoint", ckpt, "--data", short_dir, "--batch", 2, "--seq", 8],
                                   "s_train_001.bin: 16 tokens (the largest of 2 shards)", "needs 17")
        write_shard(bad, np.full(100, V))  # token V is outside the vocabulary
        self.assert_one_line_error(common, "vocabulary")
        empty_dir = self.path("empty")
        os.mkdir(empty_dir)
        self.assert_one_line_error(["--checkpoint", ckpt, "--data", empty_dir, "--seq", 8], "no *_train_*.bin")

    def test_profile_step(self):
        # One more step after the run, under torch.profiler: the run's own results are those of
        # --steps steps, and the profile names the step's four parts (on the CPU it lists no kernels).
        params, ckpt, shard, _ = self.small_setup(seed=3)
        plain = self.train(ckpt, shard, "--params-out", self.path("p0.bin"), steps=3)
        profile, trace = self.path("profile.json"), self.path("profile.trace.json.gz")
        res = self.train(ckpt, shard, "--params-out", self.path("p1.bin"), "--profile-step", profile,
                         "--profile-trace", trace, steps=3)
        self.assertEqual(res["losses"], plain["losses"])
        np.testing.assert_array_equal(self.read_f32(self.path("p1.bin"), params.size),
                                      self.read_f32(self.path("p0.bin"), params.size))
        with open(profile) as f:
            prof = json.load(f)
        self.assertEqual((prof["profiled_step"], prof["steps_before"]), (3, 3))
        self.assertEqual(sorted(prof["phases"]), ["backward", "data", "forward", "optimizer"])
        self.assertTrue(all(p["wall_ms"] > 0 for p in prof["phases"].values()), prof["phases"])
        self.assertEqual(prof["settings"]["batch"], 2)
        self.assertEqual(prof["trace"], os.path.basename(trace))
        self.assertTrue(math.isfinite(prof["loss"]))
        if not torch.cuda.is_available():
            self.assertEqual(prof["kernels"], [])
        self.assertTrue(os.path.getsize(trace) > 0)

    def test_options_this_torch_lacks(self):
        _, ckpt, shard, _ = self.small_setup()
        common = ["--checkpoint", ckpt, "--data", shard, "--batch", 2, "--seq", 8, "--steps", 1]
        if not torch.cuda.is_available():
            self.assert_one_line_error(common + ["--device", "cuda"], "CUDA")
        if int(torch.__version__.split(".")[0]) < 2:
            self.assert_one_line_error(common + ["--attention", "sdpa"], "PyTorch >= 2.0")
            self.assert_one_line_error(common + ["--compile"], "PyTorch >= 2.0")
            # stage 05's PyTorch counterpart, profiled: one line, not a traceback
            self.assert_one_line_error(common + ["--compile", "--vocab-pad", "64", "--profile-step",
                                                 self.path("p.json")], "--compile needs PyTorch >= 2.0")
        self.assert_one_line_error(common + ["--profile-trace", self.path("t.json")], "--profile-step")
        self.assert_one_line_error(common + ["--batch", 0], "--batch")
        self.assert_one_line_error(["--data", shard], "--checkpoint")


    # -- the SDPA backend (--sdpa-backend) and Inductor's padding (--inductor-shape-padding) ------

    def test_sdpa_backend_refused_on_the_cpu(self):
        # The four backends are CUDA kernels: on the CPU the option is refused, not ignored.
        _, ckpt, shard, _ = self.small_setup()
        common = ["--checkpoint", ckpt, "--data", shard, "--batch", 2, "--seq", 8, "--steps", 1]
        for backend in gpt2_reference.SDPA_BACKENDS:
            self.assert_one_line_error(common + ["--sdpa-backend", backend],
                                       f"--sdpa-backend {backend} pins a CUDA kernel", "--device cpu")
        self.assert_one_line_error(common + ["--sdpa-backend", "fastest"], "--sdpa-backend")
        self.assert_one_line_error(common + ["--inductor-shape-padding", "off"], "needs --compile")

    def test_sdpa_backend_recorded(self):
        _, ckpt, shard, _ = self.small_setup()
        out = self.path("o.json")
        proc = self.run_ref("--checkpoint", ckpt, "--data", shard, "--batch", 2, "--seq", 8, "--steps", 1,
                            "--out", out)
        self.assertIn("attention manual (no SDPA backend)", proc.stdout)
        with open(out) as f:
            res = json.load(f)
        self.assertEqual((res["sdpa_backend"], res["sdpa_backend_asked"], res["sdpa_backend_note"]),
                         (None, None, None))
        self.assertIsNone(res["inductor_padding"])  # not compiled
        self.assertEqual((res["settings"]["sdpa_backend"], res["settings"]["inductor_shape_padding"]),
                         (None, "default"))
        if hasattr(torch.nn.functional, "scaled_dot_product_attention"):  # torch 2.x: SDPA, not pinned
            proc = self.run_ref("--checkpoint", ckpt, "--data", shard, "--batch", 2, "--seq", 8, "--steps", 1,
                                "--attention", "sdpa", "--out", out)
            self.assertIn("attention sdpa (backend not pinned", proc.stdout)
            with open(out) as f:
                self.assertEqual(json.load(f)["sdpa_backend"], "unpinned")

    def test_choose_sdpa_backend(self):
        # The choice on a GPU, with the pinning and the probe replaced: cudnn falls back to flash
        # where this torch has no cuDNN backend or the GPU cannot run it, and says why; a backend
        # that cannot run otherwise is an error.
        cfg = model.GPTConfig(max_seq_len=16, vocab_size=V, n_layer=1, n_head=2, n_embd=8)
        real = gpt2_reference.sdpa_pin, gpt2_reference.probe_sdpa
        self.addCleanup(lambda: setattr(gpt2_reference, "sdpa_pin", real[0]) or
                        setattr(gpt2_reference, "probe_sdpa", real[1]))

        def choose(attention, backend, pinnable=gpt2_reference.SDPA_BACKENDS, fails=None):
            fails = fails or {}
            gpt2_reference.sdpa_pin = lambda b: (lambda: b) if b in pinnable else None
            gpt2_reference.probe_sdpa = lambda pin, device, dtype, H, T, Q: fails.get(pin())
            args = gpt2_reference.parse_args(["--checkpoint", "c", "--data", "d", "--seq", "16", "--attention",
                                              attention, "--precision", "bf16"] +
                                             (["--sdpa-backend", backend] if backend else []))
            return gpt2_reference.choose_sdpa_backend(args, cfg, "cuda")

        c = choose("manual", "flash")
        self.assertEqual((c["used"], c["asked"], c["pin"]), (None, "flash", None))
        self.assertIn("calls no SDPA", c["note"])
        self.assertEqual(choose("sdpa", None)["used"], "unpinned")
        for backend in gpt2_reference.SDPA_BACKENDS:
            c = choose("sdpa", backend)
            self.assertEqual((c["used"], c["asked"], c["note"], c["pin"]()), (backend, backend, None, backend))
        c = choose("sdpa", "cudnn", pinnable=("flash",))  # a torch without a cuDNN backend
        self.assertEqual((c["used"], c["asked"], c["pin"]()), ("flash", "cudnn", "flash"))
        self.assertIn("cudnn asked, flash used: this PyTorch", c["note"])
        c = choose("sdpa", "cudnn", fails={"cudnn": "cuDNN attention needs sm80"})  # a GPU that cannot run it
        self.assertEqual((c["used"], c["note"]), ("flash", "cudnn asked, flash used: cuDNN attention needs sm80"))
        with self.assertRaisesRegex(gpt2_reference.InputError, "--sdpa-backend flash: flash cannot run here at "
                                                               "bfloat16 .*: no kernel"):
            choose("sdpa", "flash", fails={"flash": "no kernel"})
        with self.assertRaisesRegex(gpt2_reference.InputError, "--sdpa-backend cudnn: flash cannot run"):
            choose("sdpa", "cudnn", fails={"cudnn": "no", "flash": "no either"})

    def test_sdpa_pin_sets_the_flags_for_its_block(self):
        # What pinning does on this torch, without a GPU: inside the block only the pinned backend's
        # flag is on (torch 1.13 has the flash and math flags; 2.x the others too), after it all are.
        pin = gpt2_reference.sdpa_pin("math")
        if pin is None or not hasattr(torch.backends.cuda, "flash_sdp_enabled"):
            self.skipTest(f"torch {torch.__version__} cannot pin SDPA's math backend")
        with pin():
            self.assertTrue(torch.backends.cuda.math_sdp_enabled())
            self.assertFalse(torch.backends.cuda.flash_sdp_enabled())
        self.assertTrue(torch.backends.cuda.flash_sdp_enabled())
        try:
            import torch.nn.attention as attention
            cudnn = hasattr(attention.SDPBackend, "CUDNN_ATTENTION")
        except ImportError:
            import inspect
            kernel = getattr(torch.backends.cuda, "sdp_kernel", None)
            cudnn = kernel is not None and "enable_cudnn" in inspect.signature(kernel).parameters
        if not cudnn:
            self.assertIsNone(gpt2_reference.sdpa_pin("cudnn"))  # then --sdpa-backend cudnn falls back to flash


if __name__ == "__main__":
    unittest.main(verbosity=2)
