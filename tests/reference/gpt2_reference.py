#!/usr/bin/env python3
"""An independent GPT-2 in PyTorch: the ground truth for the C++ trainers.

It implements exactly the model, data order and training step of docs/formats.md, so that
the C++ CPU reference and every GPU stage can be compared with it step by step:

  - loads our .ckpt files (the C++ tool gpt_init writes the initial one),
  - reads llm.c-format token shards in the loader order of docs/formats.md,
  - trains with torch.optim.AdamW, global-norm gradient clipping and the cosine schedule,
  - writes per-step losses, gradient norms, learning rates and timings as JSON,
    and optionally the first step's gradients and the final parameters as raw fp32.

The model itself is in model.py, next to this file. The options --precision, --attention,
--compile and --vocab-pad select the PyTorch counterpart of each C++ stage (see
tests/reference/README.md); --sdpa-backend pins the kernel behind SDPA (flash, cudnn, efficient,
math; cudnn falls back to flash where it cannot run, and says so), --inductor-shape-padding off
stops torch.compile from padding matmul shapes itself. --profile-step PATH runs one more step
after the run, under torch.profiler, and writes its per-kernel GPU times (profile_trace.py, next
to this file).

Exit codes: 0 success, 1 training failed (non-finite loss), 2 bad input or an option this
PyTorch cannot do (or the profiler failed), 77 PyTorch is not installed (CTest reports the test
as skipped).
"""

import argparse
import contextlib
import datetime
import glob
import gzip
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as exc:
    # CTest maps 77 to "skipped"; REQUIRE_TORCH=1 (CI) makes a missing torch a failure.
    if os.environ.get("REQUIRE_TORCH") == "1":
        print(f"gpt2_reference: REQUIRE_TORCH=1 but cannot import torch/numpy ({exc})", file=sys.stderr)
        sys.exit(1)
    print(f"gpt2_reference: skipped: cannot import torch/numpy ({exc})", file=sys.stderr)
    sys.exit(77)

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from model import GPT, GPTConfig  # noqa: E402  (model.py, next to this file)
import profile_trace  # noqa: E402  (next to this file; standard library only)

PROG = "gpt2_reference"
SHARD_MAGIC, SHARD_VERSION = 20240520, 1
CKPT_MAGIC, CKPT_VERSIONS = 20261122, (2, 3)  # 3 adds the run's options after the header
HEADER_INTS = 256  # both file kinds start with 256 int32 = 1024 bytes
HEADER_BYTES = HEADER_INTS * 4


class InputError(Exception):
    """Bad input: reported as one line, exit code 2."""


# ----------------------------------------------------------------------------------------
# The model's sizes and the flat parameter layout of the files


def describe(cfg):
    """As the C++ side prints a config: "L=12 H=12 C=768 maxT=1024 V=50257"."""
    return f"L={cfg.n_layer} H={cfg.n_head} C={cfg.n_embd} maxT={cfg.max_seq_len} V={cfg.vocab_size}"


def config_from_header(maxT, V, L, H, C):
    """A checkpoint header's sizes as a GPTConfig; InputError if they make no model."""
    cfg = GPTConfig(max_seq_len=maxT, vocab_size=V, n_layer=L, n_head=H, n_embd=C)
    if min(maxT, V, L, H, C) <= 0:
        raise InputError(f"invalid model config ({describe(cfg)}): every size must be positive")
    if C % H != 0:
        raise InputError(f"invalid model config ({describe(cfg)}): C must be divisible by H")
    return cfg


def config_dict(cfg):
    """The sizes as written into the --out JSON, with the names of docs/formats.md."""
    return {"maxT": cfg.max_seq_len, "V": cfg.vocab_size, "L": cfg.n_layer, "H": cfg.n_head, "C": cfg.n_embd,
            "params": num_params(cfg)}


def layout(cfg):
    """The 16 tensors of the flat parameter array: (name, shape, weight decay)."""
    V, maxT, L, C = cfg.vocab_size, cfg.max_seq_len, cfg.n_layer, cfg.n_embd
    return [
        ("wte", (V, C), True),
        ("wpe", (maxT, C), True),
        ("ln1_w", (L, C), False),
        ("ln1_b", (L, C), False),
        ("qkv_w", (L, 3 * C, C), True),
        ("qkv_b", (L, 3 * C), False),
        ("attproj_w", (L, C, C), True),
        ("attproj_b", (L, C), False),
        ("ln2_w", (L, C), False),
        ("ln2_b", (L, C), False),
        ("fc_w", (L, 4 * C, C), True),
        ("fc_b", (L, 4 * C), False),
        ("fcproj_w", (L, C, 4 * C), True),
        ("fcproj_b", (L, C), False),
        ("lnf_w", (C,), False),
        ("lnf_b", (C,), False),
    ]


def num_params(cfg):
    return sum(math.prod(shape) for _, shape, _ in layout(cfg))


def layout_params(model):
    """The model's parameters grouped as the 16 tensors of layout(), in order.

    Each entry is (name, weight decay, [parameters]); the block tensors list one parameter
    per layer, layer 0 first, which is the layer-major order of the file.
    """
    blocks = model.blocks

    def per_layer(get):
        return [get(b) for b in blocks]

    return [
        ("wte", True, [model.wte.weight]),
        ("wpe", True, [model.wpe.weight]),
        ("ln1_w", False, per_layer(lambda b: b.ln1.weight)),
        ("ln1_b", False, per_layer(lambda b: b.ln1.bias)),
        ("qkv_w", True, per_layer(lambda b: b.attn.qkv.weight)),
        ("qkv_b", False, per_layer(lambda b: b.attn.qkv.bias)),
        ("attproj_w", True, per_layer(lambda b: b.attn.proj.weight)),
        ("attproj_b", False, per_layer(lambda b: b.attn.proj.bias)),
        ("ln2_w", False, per_layer(lambda b: b.ln2.weight)),
        ("ln2_b", False, per_layer(lambda b: b.ln2.bias)),
        ("fc_w", True, per_layer(lambda b: b.mlp.fc.weight)),
        ("fc_b", False, per_layer(lambda b: b.mlp.fc.bias)),
        ("fcproj_w", True, per_layer(lambda b: b.mlp.proj.weight)),
        ("fcproj_b", False, per_layer(lambda b: b.mlp.proj.bias)),
        ("lnf_w", False, [model.ln_f.weight]),
        ("lnf_b", False, [model.ln_f.bias]),
    ]


# -- moving between the model and the flat file layout (V rows of wte, never the padded ones) --


def file_view(model, name, tensor):
    return tensor[: model.config.vocab_size] if name == "wte" else tensor


def to_flat(model, get=lambda p: p.detach()):
    """Concatenates get(p) for every parameter p in file layout order (fp32, CPU)."""
    parts = [file_view(model, name, get(p)).reshape(-1)
             for name, _, params in layout_params(model) for p in params]
    return torch.cat([t.float().cpu() for t in parts])


def unflatten(model, flat):
    """Splits a flat file-layout tensor into {parameter: tensor shaped like it}.

    wte comes back with the padded row count, the extra rows zero.
    """
    out, offset = {}, 0
    for name, _, params in layout_params(model):
        for p in params:
            rows = file_view(model, name, p)
            n = rows.numel()
            t = torch.zeros(p.shape, dtype=torch.float32)
            t[: rows.shape[0]] = flat[offset: offset + n].view(rows.shape)
            out[p] = t
            offset += n
    assert offset == flat.numel(), "flat array does not match the layout"
    return out


@torch.no_grad()
def load_flat(model, flat):
    for p, t in unflatten(model, flat).items():
        p.copy_(t)


# ----------------------------------------------------------------------------------------
# Checkpoints


def fnv1a32_loop(data, h=2166136261):
    """FNV-1a, 32 bit, one byte at a time: the definition (slow in Python, ~20 MB/s)."""
    for byte in bytes(data):
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return h


def fnv1a32(data, h=2166136261, chunk=1 << 18):
    """FNV-1a, 32 bit, of a uint8 numpy array; the same value as fnv1a32_loop, ~5x faster.

    The step is h' = (h ^ b) * P mod 2^32. Write h ^ b = h + d, where d = (l ^ b) - l
    depends only on the low byte l of h. Then h' = P*h + P*d, and after n bytes
    h_n = P^n h_0 + sum_i P^(n-i) d_i: one dot product, once the low bytes l_i are known.
    The low byte follows l' = ((l ^ b) * 147) mod 256 (147 = P mod 256). Because 147 is odd,
    bit k of l' is bit k of (l ^ b) flipped by a function of the lower bits only, so bit k
    of every l_i is a running XOR (cumsum mod 2) once bits 0..k-1 are known: 8 vectorised
    passes instead of a Python loop over every byte.
    """
    P = 16777619
    data = np.asarray(data, dtype=np.uint8).reshape(-1)
    if data.size == 0:
        return h
    chunk = min(chunk, data.size)
    # powers P^chunk .. P^1; uint64 arithmetic wraps mod 2^64, which keeps them right mod 2^32
    powers = np.cumprod(np.full(chunk, P, dtype=np.uint64), dtype=np.uint64)[::-1].copy()
    x = np.empty(chunk, np.uint8)      # l_i ^ b_i, built up bit by bit
    flips = np.empty(chunk, np.uint8)
    bit = np.empty(chunk, np.uint8)
    for start in range(0, data.size, chunk):
        b = data[start: start + chunk]
        n = b.size
        xs, fs, bs = x[:n], flips[:n], bit[:n]
        xs[:] = 0
        for k in range(8):
            # fs = how bit k changes from l_i to l_{i+1}: b's bit k xor the carry from below
            np.multiply(xs, np.uint8(147), out=fs)
            fs ^= b
            fs >>= k
            fs &= 1
            bs[0] = (h >> k) & 1  # bit k of l_0, then a running xor of the flips
            np.cumsum(fs[:-1], dtype=np.uint8, out=bs[1:])
            bs[1:] += bs[0]
            bs &= 1
            fs[:] = b
            fs >>= k
            fs &= 1
            bs ^= fs  # bit k of l_i ^ b_i
            bs <<= k
            xs |= bs
        d = xs.astype(np.int64)
        d -= xs ^ b  # d_i = (l_i ^ b_i) - l_i
        coeff = powers[chunk - n:]
        h = (int(coeff[0]) * h + int(np.dot(coeff, d.view(np.uint64)))) & 0xFFFFFFFF
    return h


def load_checkpoint(path):
    """Reads and verifies a .ckpt; returns (cfg, step, params, m, v) with m, v None if absent."""
    where = f"checkpoint {path}"
    if not os.path.isfile(path):
        raise InputError(f"{where}: cannot open (missing?)")
    size = os.path.getsize(path)
    if size < HEADER_BYTES:
        raise InputError(f"{where}: truncated header ({size} bytes)")
    header = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    if header[0] != CKPT_MAGIC:
        raise InputError(f"{where}: bad magic {header[0]} (not a checkpoint)")
    if header[1] not in CKPT_VERSIONS:
        raise InputError(f"{where}: unsupported version {header[1]}")
    try:
        cfg = config_from_header(*(int(v) for v in header[2:7]))
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    step, has_opt, count = int(header[7]), int(header[8]), int(header[9])
    n = num_params(cfg)
    if count != n or step < 0 or has_opt not in (0, 1):
        raise InputError(f"{where}: header does not match its own config (corrupt)")
    # Version 3: word 41 holds the bytes of the run's options, which follow the header (skipped here).
    options_bytes = int(header[41]) if header[1] == 3 else 0
    if not 0 <= options_bytes <= 1 << 20:
        raise InputError(f"{where}: header word 41 (bytes of the run's options) is {options_bytes} (corrupt)")
    expected = HEADER_BYTES + options_bytes + n * 4 * (3 if has_opt else 1)
    if size != expected:
        raise InputError(f"{where}: size {size} bytes, expected {expected} (truncated or corrupt)")
    after_header = np.fromfile(path, dtype=np.uint8, offset=HEADER_BYTES)
    stored = int(header[10]) & 0xFFFFFFFF
    hashed_header = header.copy()
    hashed_header[10] = 0  # the hash covers the header with its own word taken as 0, then every byte after it
    if fnv1a32(after_header, fnv1a32(hashed_header.view(np.uint8))) != stored:
        raise InputError(f"{where}: checksum mismatch (corrupt)")
    floats = torch.from_numpy(after_header[options_bytes:].view("<f4").astype(np.float32))
    params = floats[:n]
    m = floats[n: 2 * n] if has_opt else None
    v = floats[2 * n:] if has_opt else None
    return cfg, step, params, m, v


# ----------------------------------------------------------------------------------------
# Token shards and the data loader


def shard_token_count(path):
    """Checks a shard's header and size; returns its token count."""
    where = f"shard {path}"
    if not os.path.isfile(path):
        raise InputError(f"{where}: cannot open (missing?)")
    size = os.path.getsize(path)
    if size < HEADER_BYTES:
        raise InputError(f"{where}: truncated header ({size} bytes)")
    header = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    if header[0] != SHARD_MAGIC:
        raise InputError(f"{where}: bad magic {header[0]} (expected {SHARD_MAGIC}; not a token shard)")
    if header[1] != SHARD_VERSION:
        raise InputError(f"{where}: unsupported version {header[1]} (expected {SHARD_VERSION}: uint16 tokens)")
    n = int(header[2])
    if n < 0 or size != HEADER_BYTES + 2 * n:
        raise InputError(f"{where}: size {size} bytes, header says {n} tokens = "
                         f"{HEADER_BYTES + 2 * n} bytes (truncated or corrupt)")
    return n


def find_train_shards(data):
    """--data is one shard file, or a directory whose *_train_*.bin shards are used in order."""
    if os.path.isdir(data):
        paths = sorted(glob.glob(os.path.join(data, "*_train_*.bin")))
        if not paths:
            raise InputError(f"data directory {data}: no *_train_*.bin shards")
        return paths
    if not os.path.exists(data):
        raise InputError(f"data {data}: no such file or directory")
    return [data]


class DataLoader:
    """Consecutive B x T windows over the shards, no shuffling (docs/formats.md). A shard too
    short for one batch is skipped with a warning; none long enough is an error."""

    def __init__(self, paths, B, T, V, rank=0, world=1):
        self.B, self.T, self.V = B, T, V
        self.rank, self.world = rank, world
        need = B * T * world + 1  # inputs plus the one extra target token
        counts = [(path, shard_token_count(path)) for path in paths]
        self.paths = [path for path, n in counts if n >= need]
        short = [(path, n) for path, n in counts if n < need]
        if not self.paths:
            path, n = max(short, key=lambda c: c[1])
            largest = f" (the largest of {len(short)} shards)" if len(short) > 1 else ""
            raise InputError(f"shard {path}: {n} tokens{largest}, a batch of B={B} T={T} needs {need}")
        for path, n in short:
            print(f"{PROG}: warning: skipping shard {path}: {n} tokens, a batch of B={B} T={T} needs {need}")
        self.reset()

    def reset(self):
        self.shard, self.pos = 0, 0
        self.tokens = self._load(0)

    def _load(self, i):
        tokens = np.memmap(self.paths[i], dtype="<u2", mode="r", offset=HEADER_BYTES)
        top = int(tokens.max())
        if top >= self.V:
            raise InputError(f"shard {self.paths[i]}: token {top} is outside the vocabulary (V={self.V})")
        return tokens

    def next_batch(self):
        BT = self.B * self.T
        start = self.pos + self.rank * BT
        window = torch.from_numpy(self.tokens[start: start + BT + 1].astype(np.int64))
        x = window[:-1].view(self.B, self.T)
        y = window[1:].view(self.B, self.T)  # each target is the next token
        self.pos += BT * self.world
        if self.pos + BT * self.world + 1 > len(self.tokens):  # the next batch would not fit
            next_shard = (self.shard + 1) % len(self.paths)
            if next_shard != self.shard:
                self.tokens = self._load(next_shard)
            self.shard, self.pos = next_shard, 0
        return x, y


# ----------------------------------------------------------------------------------------
# Training


def learning_rate(step, steps, lr, warmup, min_lr_frac):
    """Linear warmup, then cosine decay to lr * min_lr_frac (docs/formats.md)."""
    floor = lr * min_lr_frac
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return floor + 0.5 * (lr - floor) * (1.0 + math.cos(math.pi * progress))


def clip_grad_norm(params, max_norm):
    """Global-norm clipping as torch.nn.utils.clip_grad_norm_; returns the norm before clipping.

    norm = sqrt(sum of every gradient element squared); every gradient is scaled by
    min(1, max_norm / (norm + 1e-6)); max_norm <= 0 only measures. On a GPU this is torch's
    own function. On the CPU we sum the squares ourselves with the same formula, because
    torch 1.13's CPU torch.norm accumulates a tensor serially in fp32 and is off by 0.2% on
    a 40M-element gradient like GPT-2's wte, while torch.sum sums pairwise.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if grads[0].is_cuda:
        return torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else float("inf"))
    norm = torch.stack([g.float().square().sum() for g in grads]).sum().sqrt()
    if max_norm > 0:
        scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
        for g in grads:
            g.mul_(scale.to(g.dtype))
    return norm


def write_raw_f32(path, flat):
    """Raw little-endian float32, written to PATH.tmp and renamed."""
    tmp = path + ".tmp"
    flat.numpy().astype("<f4").tofile(tmp)
    os.replace(tmp, path)


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def device_name(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def torch_major():
    return int(torch.__version__.split(".")[0])


def check_capabilities(args):
    """Options that need CUDA or PyTorch 2.x fail here, before any work, with one line."""
    if args.device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device is available to this PyTorch "
                         f"({torch.__version__})")
    if args.attention == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        raise InputError(f"--attention sdpa needs PyTorch >= 2.0 (this is {torch.__version__})")
    if args.compile and not hasattr(torch, "compile"):
        raise InputError(f"--compile needs PyTorch >= 2.0 (this is {torch.__version__})")
    if args.profile_step:
        try:
            import torch.profiler as profiler
        except ImportError:
            profiler = None
        if not all(hasattr(profiler, name) for name in ("profile", "ProfilerActivity", "record_function")):
            raise InputError(f"--profile-step needs torch.profiler (PyTorch >= 1.8.1; this is {torch.__version__})")
    if args.profile_trace and not args.profile_step:
        raise InputError("--profile-trace keeps the trace of --profile-step: give both")
    if args.sdpa_backend and args.device != "cuda":
        # The four names are CUDA kernels; on the CPU torch chooses among its own, and pinning
        # one there would measure nothing the ladder compares. Refused rather than ignored.
        raise InputError(f"--sdpa-backend {args.sdpa_backend} pins a CUDA kernel of SDPA; on --device "
                         f"{args.device} there is none to pin (leave the option out)")
    if args.inductor_shape_padding != "default" and not args.compile:
        raise InputError("--inductor-shape-padding sets how torch.compile pads matmuls: it needs --compile")
    if args.fused_adamw:
        import inspect
        if "fused" not in inspect.signature(torch.optim.AdamW).parameters or torch_major() < 2:
            raise InputError(f"--fused-adamw needs PyTorch >= 2.0 (this is {torch.__version__})")
        if args.device != "cuda":
            raise InputError("--fused-adamw needs --device cuda")


def set_precision(precision):
    """The matmul precision of each stage; the levels build on each other like the stages."""
    if precision == "fp32":
        # true fp32 matmuls: no TF32 anywhere
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    else:
        # tf32, and bf16 (which keeps TF32 for any matmul autocast leaves in fp32)
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.allow_tf32 = True


SDPA_BACKENDS = ("flash", "cudnn", "efficient", "math")
# Their names in torch.nn.attention.SDPBackend.
SDP_BACKEND_NAMES = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                     "math": "MATH"}


def sdpa_pin(backend):
    """A function that returns a context manager allowing only `backend` for
    F.scaled_dot_product_attention, or None where this torch cannot pin that backend.

    torch.nn.attention.sdpa_kernel where this torch has it (recent releases; detected, not read
    off the version), else torch.backends.cuda.sdp_kernel(enable_flash=..., ...) (2.0 on), with
    whichever of its flags that release has (a backend without one cannot be pinned). Both set the
    process's SDPA flags on entry and restore them on exit: one context manager per step."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        sdpa_kernel = None
    if sdpa_kernel is not None:
        member = getattr(SDPBackend, SDP_BACKEND_NAMES[backend], None)
        return None if member is None else (lambda: sdpa_kernel(member))
    old = getattr(torch.backends.cuda, "sdp_kernel", None)
    if old is None:
        return None
    import inspect
    params = inspect.signature(old).parameters  # its flags differ between releases
    flag = {"flash": "enable_flash", "cudnn": "enable_cudnn", "efficient": "enable_mem_efficient",
            "math": "enable_math"}[backend]
    if flag not in params:
        return None
    flags = {name: name == flag for name in ("enable_flash", "enable_cudnn", "enable_mem_efficient", "enable_math")
             if name in params}
    return lambda: old(**flags)


def probe_sdpa(pin, device, dtype, H, T, Q):
    """None if SDPA runs forward and backward under pin() at the model's attention shape (one
    sequence), else why not: the warning torch gives for the pinned backend, or the error."""
    import warnings
    q, k, v = (torch.randn(1, H, T, Q, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with pin():
                F.scaled_dot_product_attention(q, k, v, is_causal=True).float().sum().backward()
            torch.cuda.synchronize(device)
            return None
        except RuntimeError as exc:
            error = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
    reasons = [str(w.message).strip().splitlines()[0] for w in caught if str(w.message).strip()]
    return "; ".join(reasons[:2] + [error]) if reasons else error


def choose_sdpa_backend(args, cfg, device):
    """The SDPA backend of this run: {"used", "asked", "note", "pin"}, where pin() makes the
    context manager that pins it (None: nothing pinned). used is None with --attention manual
    (no SDPA), "unpinned" without --sdpa-backend (torch's own choice). cudnn falls back to flash
    where this torch has no cuDNN backend or the GPU cannot run it; the note says why."""
    asked = args.sdpa_backend
    out = {"used": None, "asked": asked, "note": None, "pin": None}
    if args.attention != "sdpa":
        if asked:
            out["note"] = f"--attention {args.attention} calls no SDPA: --sdpa-backend {asked} has nothing to pin"
        return out
    if not asked:
        out["used"] = "unpinned"
        return out
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    shape = (cfg.n_head, args.seq, cfg.n_embd // cfg.n_head)
    backend, pin = asked, sdpa_pin(asked)
    why = None if pin else f"this PyTorch ({torch.__version__}) has no {asked} SDPA backend to pin"
    if pin:
        why = probe_sdpa(pin, device, dtype, *shape)
    if why and asked == "cudnn":
        out["note"] = f"cudnn asked, flash used: {why}"
        backend, pin = "flash", sdpa_pin("flash")
        why = probe_sdpa(pin, device, dtype, *shape) if pin else "this PyTorch cannot pin flash either"
    if why:
        raise InputError(f"--sdpa-backend {asked}: {backend} cannot run here at {str(dtype)[6:]} "
                         f"(H={shape[0]} T={shape[1]} head size {shape[2]}): {why}")
    out.update(used=backend, pin=pin)
    return out


def describe_attention(args, sdpa):
    """The attention part of the start line: which path, and which SDPA backend."""
    if args.attention != "sdpa":
        return f"attention {args.attention} (no SDPA backend)"
    if sdpa["used"] == "unpinned":
        return "attention sdpa (backend not pinned: torch's choice)"
    fell_back = f"; {sdpa['note']}" if sdpa["note"] else ""
    return f"attention sdpa (backend {sdpa['used']}, pinned{fell_back})"


def set_inductor_padding(mode):
    """--inductor-shape-padding: off turns off Inductor's padding of matmul shapes
    (config.shape_padding: off by default in 2.0, on from 2.1) and of strides
    (config.comprehensive_padding, in newer releases), so that an unaligned vocabulary costs
    what it costs; on forces both on; default leaves them. Returns the values in effect."""
    import torch._inductor.config as inductor
    names = [n for n in ("shape_padding", "comprehensive_padding") if hasattr(inductor, n)]
    if mode != "default":
        for name in names:
            setattr(inductor, name, mode == "on")
    return {name: bool(getattr(inductor, name)) for name in names}


def build_model(args, device):
    """Returns (model, start_step, optimizer_state) from --checkpoint: its header gives the
    model's sizes, its payload the parameters (and, with --resume, the AdamW state)."""
    cfg, ckpt_step, params, m, v = load_checkpoint(args.checkpoint)
    padded = (cfg.vocab_size + args.vocab_pad - 1) // args.vocab_pad * args.vocab_pad
    model = GPT(cfg, attention=args.attention, padded_vocab=padded)
    load_flat(model, params)
    opt_state, start = None, 0
    if args.resume:
        if m is None:
            raise InputError(f"checkpoint {args.checkpoint}: --resume needs optimizer state, "
                             "and this checkpoint has none")
        opt_state, start = (m, v), ckpt_step
    return model.to(device), start, opt_state


def make_optimizer(model, args):
    """AdamW with two groups: weight decay for matrices and embeddings, none for the rest."""
    decay, no_decay = [], []
    for _, decays, params in layout_params(model):
        (decay if decays else no_decay).extend(params)
    groups = [{"params": decay, "weight_decay": args.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    extra = {"fused": True} if args.fused_adamw else {}
    return torch.optim.AdamW(groups, lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps, **extra)


def load_optimizer_state(optimizer, model, m, v, step):
    """Puts the checkpoint's AdamW moments into torch's AdamW, which counts `step` taken."""
    m_of, v_of = unflatten(model, m), unflatten(model, v)
    state_dict = optimizer.state_dict()
    for group, saved in zip(optimizer.param_groups, state_dict["param_groups"]):
        for p, index in zip(group["params"], saved["params"]):
            state_dict["state"][index] = {
                "step": torch.tensor(float(step), dtype=torch.float32),
                "exp_avg": m_of[p].to(p.device),
                "exp_avg_sq": v_of[p].to(p.device),
            }
    optimizer.load_state_dict(state_dict)


def train(args):
    check_capabilities(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    set_precision(args.precision)
    device = torch.device(args.device)

    model, start, opt_state = build_model(args, device)
    cfg = model.config
    if args.seq > cfg.max_seq_len:
        raise InputError(f"--seq {args.seq} is longer than the model's context maxT={cfg.max_seq_len}")
    if start >= args.steps:
        raise InputError(f"checkpoint is at step {start}; --steps {args.steps} leaves nothing to do "
                         "(--steps counts the whole run, resumed steps included)")
    loader = DataLoader(find_train_shards(args.data), args.batch, args.seq, cfg.vocab_size)
    for _ in range(start):  # a resumed run continues where the data order left off
        loader.next_batch()

    optimizer = make_optimizer(model, args)
    if opt_state is not None:
        load_optimizer_state(optimizer, model, *opt_state, start)
    params = list(model.parameters())

    sdpa = choose_sdpa_backend(args, cfg, device)
    if sdpa["note"]:
        print(f"{PROG}: note: {sdpa['note']}", flush=True)
    inductor_padding = set_inductor_padding(args.inductor_shape_padding) if args.compile else None
    # The backend is pinned around forward and backward, outside the compiled model: dynamo never
    # has to trace the context manager (whether it can depends on the release), and AOTAutograd
    # traces forward and backward at the first call, inside it, where SDPA's dispatch reads the
    # pinned flags; so the compiled graph holds the pinned kernel too. (Reasoned, not yet run on a
    # GPU: --profile-step lists the attention kernels by name, which shows the one that ran.)
    pin = sdpa["pin"] or contextlib.nullcontext
    run = torch.compile(model, mode=args.compile_mode) if args.compile else model
    if args.precision == "bf16":
        autocast = lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    else:
        autocast = contextlib.nullcontext
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)

    print(f"{PROG}: torch {torch.__version__} on {device.type} ({device_name(device)}), "
          f"model {describe(cfg)} ({num_params(cfg):,} params, padded V={model.padded_vocab}), "
          f"B={args.batch} T={args.seq}, steps {start}..{args.steps - 1}, precision {args.precision}, "
          f"{describe_attention(args, sdpa)}{', compiled' if args.compile else ''}"
          f"{', fused AdamW' if args.fused_adamw else ''}"
          f"{'' if args.inductor_shape_padding == 'default' else ', Inductor padding ' + args.inductor_shape_padding}",
          flush=True)

    tokens_per_step = args.batch * args.seq

    def one_step(step, mark=lambda part: contextlib.nullcontext()):
        """One training step, to the GPU's last kernel; mark(part) names its four parts for the
        profiler (--profile-step), and costs nothing otherwise."""
        with mark("data"):
            x, y = loader.next_batch()
            x, y = x.to(device), y.to(device)
        lr = learning_rate(step, args.steps, args.lr, args.warmup, args.min_lr_frac)
        for group in optimizer.param_groups:
            group["lr"] = lr
        with pin():
            with mark("forward"):
                with autocast():
                    loss = run(x, y)
            with mark("backward"):
                loss.backward()
        if step == start and args.grads_out:
            write_raw_f32(args.grads_out, to_flat(model, lambda p: p.grad))
        with mark("optimizer"):
            norm = clip_grad_norm(params, args.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize(device)
        return loss, norm, lr

    losses, norms, lrs, step_ms = [], [], [], []
    for step in range(start, args.steps):
        t0 = time.perf_counter()
        loss, norm, lr = one_step(step)
        ms = (time.perf_counter() - t0) * 1000.0

        loss_value, norm_value = loss.item(), norm.item()
        if not math.isfinite(loss_value):
            print(f"{PROG}: error: non-finite loss ({loss_value}) at step {step}", file=sys.stderr)
            sys.exit(1)
        losses.append(loss_value)
        norms.append(norm_value)
        lrs.append(lr)
        step_ms.append(ms)
        print(f"step {step + 1:5d}/{args.steps} | loss {loss_value:.6f} | lr {lr:.4e} | "
              f"norm {norm_value:.4f} | {ms:8.2f} ms | {tokens_per_step / (ms / 1000.0):9.0f} tok/s",
              flush=True)

    steady = step_ms[args.warmup_steps_timing:] or step_ms  # skip compilation and warm-up
    tok_s = sorted(tokens_per_step / (ms / 1000.0) for ms in steady)
    mid = len(tok_s) // 2
    median = tok_s[mid] if len(tok_s) % 2 else 0.5 * (tok_s[mid - 1] + tok_s[mid])
    print(f"{PROG}: median {median:.0f} tok/s over {len(steady)} steps, final loss {losses[-1]:.6f}",
          flush=True)

    settings = dict(vars(args))
    settings.update(padded_vocab=model.padded_vocab, first_step=start, tokens_per_step=tokens_per_step)
    about = {
        "torch_version": torch.__version__,
        "device": device.type,
        "device_name": device_name(device),
        "config": config_dict(cfg),
        "settings": settings,
        # The kernel behind SDPA: null with --attention manual, "unpinned" without --sdpa-backend;
        # asked differs from it where cudnn fell back to flash (the note says why).
        "sdpa_backend": sdpa["used"],
        "sdpa_backend_asked": sdpa["asked"],
        "sdpa_backend_note": sdpa["note"],
        "inductor_padding": inductor_padding,  # Inductor's padding flags in effect; null uncompiled
    }
    if args.params_out:
        write_raw_f32(args.params_out, to_flat(model))
    if args.out:
        write_json(args.out, dict(about, **{
            "losses": losses,
            "grad_norms": [n if math.isfinite(n) else None for n in norms],  # JSON has no NaN
            "lrs": lrs,
            "step_ms": step_ms,
            "tokens_per_s_median": median,
            "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
        }))
    if args.profile_step:
        # After everything above is written: the run's curve, times and parameters are those of
        # --steps steps, and the profiled step is one more.
        profile_one_step(args, one_step, args.steps, device, about, step_ms)


def profile_one_step(args, one_step, step, device, about, step_ms):
    """Step `step` (the one after the run) under torch.profiler; its kernels go to --profile-step."""
    from torch.profiler import ProfilerActivity, profile, record_function

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    if cuda:
        torch.cuda.synchronize(device)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            with profile(activities=activities, record_shapes=True) as prof:
                t0 = time.perf_counter()
                loss, _, _ = one_step(step, lambda part: record_function(profile_trace.PHASE_PREFIX + part))
                wall_ms = (time.perf_counter() - t0) * 1000.0
            trace = os.path.join(tmp, "trace.json")
            prof.export_chrome_trace(trace)
            events = profile_trace.load_trace(trace)
            if args.profile_trace:
                opener = gzip.open if args.profile_trace.endswith(".gz") else open
                with open(trace, "rb") as src, opener(args.profile_trace + ".tmp", "wb") as dst:
                    shutil.copyfileobj(src, dst)
                os.replace(args.profile_trace + ".tmp", args.profile_trace)
    except (RuntimeError, OSError, ValueError) as exc:
        raise InputError(f"--profile-step: the profiler failed: {str(exc).splitlines()[0] if str(exc) else exc!r}") \
            from None
    loss_value = loss.item()
    if not math.isfinite(loss_value):
        print(f"{PROG}: error: non-finite loss ({loss_value}) at step {step} (the profiled step)", file=sys.stderr)
        sys.exit(1)
    summary = dict(about)
    summary.update({
        "program": "gpt2_reference.py --profile-step",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "profiled_step": step,
        "steps_before": len(step_ms),
        "step_ms_median": median_of(step_ms[args.warmup_steps_timing:] or step_ms),
        "profiled_step_wall_ms": wall_ms,
        "loss": loss_value,
        # The kept trace, relative to this file (it usually lies beside it).
        "trace": os.path.relpath(os.path.abspath(args.profile_trace),
                                 os.path.dirname(os.path.abspath(args.profile_step))) if args.profile_trace else None,
    })
    summary.update(profile_trace.summarise(events))
    write_json(args.profile_step, summary)
    t = summary["totals"]
    note = "" if cuda else " (on the CPU: no GPU kernels to list)"
    print(f"{PROG}: profiled step {step + 1}: {t['events']} GPU events, {t['gpu_ms']:.2f} ms of GPU time "
          f"({t['gpu_busy_ms']:.2f} ms busy) in a {wall_ms:.2f} ms step under the profiler{note}; "
          f"wrote {args.profile_step}", flush=True)


def median_of(values):
    v = sorted(values)
    n = len(v)
    return None if n == 0 else v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


# ----------------------------------------------------------------------------------------
# Command line


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is a single line (exit code 2 as usual)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parse_args(argv=None):
    p = OneLineParser(
        prog=PROG,
        description="Independent PyTorch GPT-2 reference: trains on llm.c token shards from our "
                    ".ckpt checkpoint (gpt_init writes one) and writes losses, gradient norms, "
                    "learning rates and timings (docs/formats.md).",
        epilog="Exit codes: 0 ok, 1 non-finite loss, 2 bad input or unsupported option, "
               "77 torch not installed.")
    g = p.add_argument_group("model")
    g.add_argument("--checkpoint", required=True, metavar="PATH",
                   help="our .ckpt file: the model's sizes and initial parameters "
                        "(a fresh one: gpt_init --model d12 --out PATH)")
    g.add_argument("--resume", action="store_true",
                   help="also load the checkpoint's AdamW state and continue from its step count")
    g.add_argument("--vocab-pad", type=int, default=1, metavar="M",
                   help="pad the vocabulary to a multiple of M (zero rows; padded logits sliced off "
                        "before the loss); default 1 = no padding")

    g = p.add_argument_group("data and schedule")
    g.add_argument("--data", required=True, metavar="PATH",
                   help="a token shard, or a directory whose *_train_*.bin shards are read in sorted order")
    g.add_argument("--batch", type=int, default=4, metavar="B", help="sequences per step (default 4)")
    g.add_argument("--seq", type=int, default=64, metavar="T", help="tokens per sequence (default 64)")
    g.add_argument("--steps", type=int, default=10, metavar="N",
                   help="steps of the whole run, the schedule's S; a resumed run stops there too (default 10)")
    g.add_argument("--lr", type=float, default=6e-4, metavar="LR", help="peak learning rate (default 6e-4)")
    g.add_argument("--warmup", type=int, default=0, metavar="W", help="linear warmup steps (default 0)")
    g.add_argument("--min-lr-frac", type=float, default=0.1, metavar="F",
                   help="cosine floor as a fraction of --lr (default 0.1)")
    g.add_argument("--weight-decay", type=float, default=0.1, metavar="WD",
                   help="AdamW weight decay for matrices and embeddings (default 0.1)")
    g.add_argument("--beta1", type=float, default=0.9, metavar="B1", help="AdamW beta1 (default 0.9)")
    g.add_argument("--beta2", type=float, default=0.95, metavar="B2", help="AdamW beta2 (default 0.95)")
    g.add_argument("--eps", type=float, default=1e-8, metavar="EPS", help="AdamW epsilon (default 1e-8)")
    g.add_argument("--grad-clip", type=float, default=1.0, metavar="CLIP",
                   help="clip the global gradient norm to this; <= 0 disables (default 1.0)")

    g = p.add_argument_group("execution (the PyTorch counterparts of the C++ stages)")
    g.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="default cpu")
    g.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32",
                   help="fp32: no TF32 (stage 00); tf32: matmul precision 'high' (01); "
                        "bf16: autocast to bfloat16 around forward and loss, TF32 kept (02). Default fp32")
    g.add_argument("--attention", choices=["manual", "sdpa"], default="manual",
                   help="manual: T x T scores with a causal mask (00-02); "
                        "sdpa: F.scaled_dot_product_attention, needs torch 2.x (03). Default manual")
    g.add_argument("--compile", action="store_true", help="torch.compile the model, needs torch 2.x (04)")
    g.add_argument("--compile-mode", choices=["default", "reduce-overhead", "max-autotune"],
                   default="default", help="mode for --compile; reduce-overhead adds CUDA graphs (default: default)")
    g.add_argument("--sdpa-backend", choices=SDPA_BACKENDS, metavar="{" + ",".join(SDPA_BACKENDS) + "}",
                   help="with --attention sdpa: pin SDPA's kernel (flash: FlashAttention-2; cudnn: cuDNN's, "
                        "falling back to flash where this torch or GPU cannot run it, which is printed and "
                        "recorded; efficient: memory-efficient; math: unfused). CUDA only: refused on the CPU. "
                        "Default: not pinned, torch's choice")
    g.add_argument("--inductor-shape-padding", choices=["default", "on", "off"], default="default",
                   help="with --compile: off stops Inductor padding matmul shapes and strides itself "
                        "(torch._inductor.config.shape_padding, comprehensive_padding), on forces it; "
                        "default: torch's own setting")
    g.add_argument("--fused-adamw", action="store_true",
                   help="torch's fused CUDA AdamW (one launch for all tensors), needs torch 2.x")
    g.add_argument("--threads", type=int, default=0, metavar="N",
                   help="torch.set_num_threads(N); default: leave torch's choice")

    g = p.add_argument_group("outputs")
    g.add_argument("--out", metavar="PATH", help="JSON with losses, grad norms, lrs, timings")
    g.add_argument("--grads-out", metavar="PATH",
                   help="first step's gradients before clipping, raw fp32 in the file layout")
    g.add_argument("--params-out", metavar="PATH", help="final parameters, raw fp32 in the file layout")
    g.add_argument("--warmup-steps-timing", type=int, default=3, metavar="K",
                   help="steps left out of the tokens/s median (default 3)")
    g.add_argument("--profile-step", metavar="PATH",
                   help="after the run (--out, --params-out written first), one more step under torch.profiler "
                        "(CPU and CUDA activity, shapes recorded): its per-kernel GPU times as JSON "
                        "(profile_trace.py); the run's steps before it are the warm-up")
    g.add_argument("--profile-trace", metavar="PATH",
                   help="with --profile-step: also keep the profiler's Chrome trace (gzipped when PATH ends in .gz)")
    args = p.parse_args(argv)

    for name in ("batch", "seq", "steps", "vocab_pad"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    for name in ("warmup", "threads", "warmup_steps_timing"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must not be negative")
    if not 0.0 <= args.min_lr_frac <= 1.0:
        p.error("--min-lr-frac must be in [0, 1]")
    if not (args.lr >= 0 and args.weight_decay >= 0 and args.eps > 0):
        p.error("--lr and --weight-decay must not be negative, --eps must be positive")
    if not (0.0 <= args.beta1 < 1.0 and 0.0 <= args.beta2 < 1.0):
        p.error("--beta1 and --beta2 must be in [0, 1)")
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        train(args)
    except InputError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        if "out of memory" in str(exc):
            print(f"{PROG}: error: out of memory at B={args.batch} T={args.seq}; try a smaller "
                  "--batch or --seq", file=sys.stderr)
            return 2
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
