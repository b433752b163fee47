#!/usr/bin/env python3
"""GPT-2 in Hugging Face's safetensors files, on the Python side: a reader and a writer of our own.

The C++ side (common/model/safetensors.h) exports a model as transformers lays it out and imports
GPT-2 from transformers' files. This script checks both directions against model.py's GPT without
sharing a line of code with the C++ side, and without the `safetensors` or `transformers` packages
(Debian has neither): the format is simple enough to read with struct and json.

  read       DIR/model.safetensors (what gpt_safetensors exported), its config.json beside it,
             loaded into model.py's GPT; the logits of a batch of tokens -> OUT/exported_logits.bin
  write      a GPT-2 with random parameters, stored three ways as transformers would store it
             (OUT/python_f32, python_bf16, python_f16), each with the logits of exactly the stored
             values -> OUT/python_*_logits.bin; the C++ side imports them and must agree
  selfcheck  the writer, then the reader, round trip; the reader against bytes written by hand;
             malformed files are refused

A safetensors file: an 8-byte little-endian length N, N bytes of JSON (name -> {"dtype", "shape",
"data_offsets": [begin, end]}, and "__metadata__"), then the tensors' raw little-endian bytes, the
offsets counted from the end of the JSON. GPT-2's keys (transformers' GPT2Model; GPT2LMHeadModel
puts "transformer." in front): wte.weight, wpe.weight, h.{i}.ln_1, attn.c_attn, attn.c_proj, ln_2,
mlp.c_fc, mlp.c_proj, ln_f. The four matrices of a block are Conv1D weights, stored (in, out): the
transpose of nn.Linear's (out, in), which is what model.py and our file layout hold.

Exit codes: 0 success; 1 a self-check failed; 2 bad input (one line on stderr); 77 `import torch`
failed (CTest reports the test as skipped; REQUIRE_TORCH=1 makes it a failure).
"""

import argparse
import json
import math
import os
import struct
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as exc:
    if os.environ.get("REQUIRE_TORCH") == "1":
        print(f"safetensors_reference: REQUIRE_TORCH=1 but cannot import torch/numpy ({exc})", file=sys.stderr)
        sys.exit(1)
    print(f"safetensors_reference: skipped: cannot import torch/numpy ({exc})", file=sys.stderr)
    sys.exit(77)

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from model import GPT, GPTConfig  # noqa: E402  (model.py, next to this file)

PROG = "safetensors_reference"
PREFIX = "transformer."  # GPT2LMHeadModel's keys; GPT2Model's (and GPT-2's released file) have none


class InputError(Exception):
    """Bad input: reported as one line, exit code 2."""


# ----------------------------------------------------------------------------------------
# The file format


# Bytes per element of every dtype the format names (we only compute with the three float ones,
# but a reader must know the others' sizes to check a file that holds them).
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


class Stored:
    """One tensor of a file: its dtype, shape and raw bytes."""

    def __init__(self, dtype, shape, raw):
        self.dtype, self.shape, self.raw = dtype, tuple(shape), raw


def no_duplicate_keys(pairs):
    # json.loads keeps the last of two equal keys silently; a file that says two things is refused.
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise InputError(f"key {sorted(k for k in keys if keys.count(k) > 1)[0]!r} appears twice in the header")
    return dict(pairs)


def read_safetensors(path):
    """Reads PATH; returns ({name: Stored}, metadata). Every rule of the format is checked: the
    header fits the file, each entry has a known dtype and a shape whose bytes are its offsets'
    span, and the tensors cover the data section exactly (no hole, no overlap, nothing after)."""
    where = f"safetensors file {path}"
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise InputError(f"{where}: cannot read ({exc.strerror})") from None
    if len(data) < 8:
        raise InputError(f"{where}: {len(data)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise InputError(f"{where}: header of {n} bytes, but the file has only {len(data) - 8} after the length")
    try:
        header = json.loads(data[8: 8 + n].decode("utf-8"), object_pairs_hook=no_duplicate_keys)
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: header is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except ValueError as exc:
        raise InputError(f"{where}: header is not JSON ({exc})") from None
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    if not isinstance(header, dict):
        raise InputError(f"{where}: header is not a JSON object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise InputError(f"{where}: __metadata__ must map names to strings")

    body = memoryview(data)[8 + n:]
    spans = []  # (begin, end, name)
    tensors = {}
    for name, info in header.items():
        entry = f"{where}: tensor {name!r}"
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise InputError(f"{entry}: expected exactly the fields dtype, shape and data_offsets")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in DTYPE_BYTES:
            raise InputError(f"{entry}: unknown dtype {dtype!r}")
        # bool is a subclass of int in Python: true/false are not sizes
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise InputError(f"{entry}: shape must be a list of non-negative integers")
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets)
                or not 0 <= offsets[0] <= offsets[1]):
            raise InputError(f"{entry}: data_offsets must be two integers, 0 <= begin <= end")
        begin, end = offsets
        nbytes = math.prod(shape) * DTYPE_BYTES[dtype]
        if end - begin != nbytes:
            raise InputError(f"{entry}: shape {shape} of {dtype} is {nbytes} bytes, its offsets span {end - begin}")
        spans.append((begin, end, name))
        tensors[name] = Stored(dtype, shape, None)
    # The tensors, in the order of their data (not of the keys), must tile the data section.
    pos = 0
    for begin, end, name in sorted(spans):
        if begin != pos:
            what = "a hole" if begin > pos else "an overlap"
            raise InputError(f"{where}: tensor {name!r} begins at {begin}, the one before ends at {pos} ({what})")
        if end > len(body):
            raise InputError(f"{where}: tensor {name!r} ends at {end}, after the data ({len(body)} bytes; truncated?)")
        tensors[name].raw = bytes(body[begin:end])
        pos = end
    if pos != len(body):
        raise InputError(f"{where}: the tensors cover {pos} bytes of data, the file holds {len(body)}")
    return tensors, metadata


def to_float32(stored, name="tensor"):
    """A stored tensor's values as a float32 numpy array of its shape. F16 and BF16 widen exactly."""
    if stored.dtype == "F32":
        values = np.frombuffer(stored.raw, dtype="<f4").astype(np.float32)
    elif stored.dtype == "F16":
        values = np.frombuffer(stored.raw, dtype="<f2").astype(np.float32)
    elif stored.dtype == "BF16":
        # bf16 is the top half of a float32: shift the 16 bits up, the low mantissa bits are 0
        values = (np.frombuffer(stored.raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        raise InputError(f"{name}: dtype {stored.dtype} is not a floating-point type this reader converts")
    return values.reshape(stored.shape)


def encode(dtype, values):
    """float32 values as the raw little-endian bytes of dtype (rounded to nearest, ties to even)."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    if dtype == "F32":
        return values.astype("<f4").tobytes()
    if dtype == "F16":
        return values.astype("<f2").tobytes()
    if dtype == "BF16":
        # Keep the top 16 bits, rounded: add 0x7FFF, plus 1 when the kept part is odd (ties to even).
        bits = values.view(np.uint32).astype(np.uint64)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()
    raise ValueError(f"cannot encode {dtype}")


def rounded(dtype, values):
    """The float32 values a file of dtype holds for `values`."""
    return to_float32(Stored(dtype, np.shape(values), encode(dtype, values)))


def write_safetensors(path, tensors, metadata, key_order=sorted):
    """Writes [(name, dtype, float32 array)], their data in the order given, the JSON's keys in
    key_order(names) after "__metadata__" (transformers' writer sorts them; the C++ reader must
    not assume either order matches the data's). The JSON is padded with spaces to a multiple of
    8 bytes, as the safetensors library does. Written to PATH.tmp, then renamed."""
    entries, blobs, pos = {}, [], 0
    for name, dtype, values in tensors:
        raw = encode(dtype, values)
        entries[name] = {"dtype": dtype, "shape": list(np.shape(values)), "data_offsets": [pos, pos + len(raw)]}
        blobs.append(raw)
        pos += len(raw)
    header = {"__metadata__": metadata}
    header.update((name, entries[name]) for name in key_order(list(entries)))
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------
# GPT-2's keys and model.py's modules


# A block's tensors: transformers' name, the nn.Linear / LayerNorm parameter of model.py's Block,
# and whether the file holds its transpose (a Conv1D weight, stored (in, out)).
BLOCK_TENSORS = [
    ("ln_1.weight", lambda b: b.ln1.weight, False),
    ("ln_1.bias", lambda b: b.ln1.bias, False),
    ("attn.c_attn.weight", lambda b: b.attn.qkv.weight, True),
    ("attn.c_attn.bias", lambda b: b.attn.qkv.bias, False),
    ("attn.c_proj.weight", lambda b: b.attn.proj.weight, True),
    ("attn.c_proj.bias", lambda b: b.attn.proj.bias, False),
    ("ln_2.weight", lambda b: b.ln2.weight, False),
    ("ln_2.bias", lambda b: b.ln2.bias, False),
    ("mlp.c_fc.weight", lambda b: b.mlp.fc.weight, True),
    ("mlp.c_fc.bias", lambda b: b.mlp.fc.bias, False),
    ("mlp.c_proj.weight", lambda b: b.mlp.proj.weight, True),
    ("mlp.c_proj.bias", lambda b: b.mlp.proj.bias, False),
]


def hf_parameters(model):
    """[(key without prefix, parameter of model, stored transposed)] in the model's order."""
    out = [("wte.weight", model.wte.weight, False), ("wpe.weight", model.wpe.weight, False)]
    for i, block in enumerate(model.blocks):
        out += [(f"h.{i}.{name}", get(block), transposed) for name, get, transposed in BLOCK_TENSORS]
    return out + [("ln_f.weight", model.ln_f.weight, False), ("ln_f.bias", model.ln_f.bias, False)]


def is_mask_buffer(key):
    """The causal-mask buffers GPT-2's released file holds: h.{i}.attn.bias, h.{i}.attn.masked_bias.
    Not parameters: the attention masks the future itself."""
    parts = key.split(".")
    return len(parts) == 4 and parts[0] == "h" and parts[1].isdigit() and parts[2] == "attn" and \
        parts[3] in ("bias", "masked_bias")


def hf_config(path, names, tensors):
    """The model's sizes: from config.json beside the file when there is one (checked against
    the shapes), else from the shapes, with n_head = C / 64 (GPT-2's head size)."""
    def shape(key):
        if key not in names:
            raise InputError(f"{path}: no tensor {key!r} (nor {PREFIX + key!r})")
        return tensors[names[key]].shape

    wte, wpe = shape("wte.weight"), shape("wpe.weight")
    if len(wte) != 2 or len(wpe) != 2 or wte[1] != wpe[1]:
        raise InputError(f"{path}: wte.weight {list(wte)} and wpe.weight {list(wpe)} are not (V, C) and (maxT, C)")
    V, C, maxT = wte[0], wte[1], wpe[0]
    layers = {int(k.split(".")[1]) for k in names if k.startswith("h.") and k.split(".")[1].isdigit()}
    L = max(layers) + 1 if layers else 0  # a layer missing in between is a missing key later
    config_path = os.path.join(os.path.dirname(path), "config.json")
    if os.path.exists(config_path):
        try:
            with open(config_path, encoding="utf-8") as f:
                config = json.load(f)
            H = config["n_head"]
            stated = {"n_embd": C, "n_layer": L, "n_positions": maxT, "vocab_size": V}
            for key, size in stated.items():
                if config[key] != size:
                    raise InputError(f"{config_path}: {key} is {config[key]}, the tensors say {size}")
            # what model.py computes and cannot change: tanh GELU, LayerNorm eps 1e-5
            if config.get("activation_function", "gelu_new") != "gelu_new":
                raise InputError(f"{config_path}: activation_function {config['activation_function']!r}, "
                                 "model.py has only gelu_new (tanh GELU)")
            if config.get("layer_norm_epsilon", 1e-5) != 1e-5:
                raise InputError(f"{config_path}: layer_norm_epsilon {config['layer_norm_epsilon']}, model.py has 1e-5")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{config_path}: cannot read the sizes ({type(exc).__name__}: {exc})") from None
        source = "config.json"
    else:
        H = C // 64
        source = "the shapes (n_head = C / 64)"
    if not (isinstance(H, int) and min(V, C, maxT, L, H) > 0 and C % H == 0):
        raise InputError(f"{path}: sizes V={V} C={C} maxT={maxT} L={L} H={H} make no GPT-2")
    return GPTConfig(max_seq_len=maxT, vocab_size=V, n_layer=L, n_head=H, n_embd=C), source


def hf_model_file(path):
    return os.path.join(path, "model.safetensors") if os.path.isdir(path) else path


@torch.no_grad()
def load_hf_gpt2(path):
    """model.py's GPT from a GPT-2 model.safetensors (PATH or PATH/model.safetensors); returns
    (model, notes, the file's metadata). Conv1D weights are transposed into nn.Linear's
    orientation. Every tensor must be accounted for: a missing key, a wrong shape or an unknown
    key is an InputError."""
    path = hf_model_file(path)
    tensors, metadata = read_safetensors(path)
    names = {}  # key without the prefix -> key in the file
    for key in tensors:
        short = key[len(PREFIX):] if key.startswith(PREFIX) else key
        if short in names:
            raise InputError(f"{path}: {key!r} and {names[short]!r} are the same tensor")
        names[short] = key
    cfg, source = hf_config(path, names, tensors)
    model = GPT(cfg)
    prefixed = any(key.startswith(PREFIX) for key in tensors)
    notes = [f"{len(tensors)} tensors of {'/'.join(sorted({t.dtype for t in tensors.values()}))}, keys "
             + ("with the 'transformer.' prefix (GPT2LMHeadModel)" if prefixed else "without a prefix (GPT2Model)"),
             f"sizes L={cfg.n_layer} H={cfg.n_head} C={cfg.n_embd} maxT={cfg.max_seq_len} V={cfg.vocab_size} "
             f"from {source}"]
    used = set()
    for short, param, transposed in hf_parameters(model):
        if short not in names:
            raise InputError(f"{path}: missing tensor {short!r}")
        key = names[short]
        values = to_float32(tensors[key], key)
        want = tuple(reversed(param.shape)) if transposed else tuple(param.shape)
        if values.shape != want:
            raise InputError(f"{path}: {key!r} has shape {list(values.shape)}, expected {list(want)}")
        param.copy_(torch.from_numpy(np.ascontiguousarray(values.T if transposed else values)))
        used.add(short)
    for short, key in names.items():
        if short in used:
            continue
        if short == "lm_head.weight":
            # the LM head is tied to wte: a file may repeat it, and then it must be the same
            if not np.array_equal(to_float32(tensors[key], key), model.wte.weight.numpy()):
                raise InputError(f"{path}: lm_head.weight differs from wte.weight (the head must be tied)")
            notes.append("lm_head.weight equals wte.weight (tied)")
        elif is_mask_buffer(short):
            notes.append(f"ignored {key} (a causal-mask buffer)")
        else:
            raise InputError(f"{path}: unknown tensor {key!r}")
    return model, notes, metadata


# ----------------------------------------------------------------------------------------
# Tokens, logits and the commands


def read_tokens(path):
    """A token batch as the C++ tool writes it: PATH is a JSON {"batch": B, "seq": T, "file": NAME,
    ...}, NAME (beside it) B*T int32 little-endian ids, row by row. Returns (tokens (B, T) int64, JSON)."""
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
        B, T = meta["batch"], meta["seq"]
        ids = np.fromfile(os.path.join(os.path.dirname(path), meta["file"]), dtype="<i4")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"tokens {path}: cannot read ({type(exc).__name__}: {exc})") from None
    if not (isinstance(B, int) and isinstance(T, int) and B > 0 and T > 0) or ids.size != B * T:
        raise InputError(f"tokens {path}: {ids.size} ids in {meta['file']}, batch {B} x seq {T} needs {B * T}")
    return torch.from_numpy(ids.astype(np.int64).reshape(B, T)), meta


@torch.no_grad()
def logits_of(model, tokens):
    cfg = model.config
    B, T = tokens.shape
    if T > cfg.max_seq_len:
        raise InputError(f"sequences of {T} tokens are longer than the model's maxT={cfg.max_seq_len}")
    if int(tokens.min()) < 0 or int(tokens.max()) >= cfg.vocab_size:
        raise InputError(f"token ids {int(tokens.min())}..{int(tokens.max())} are outside the vocabulary "
                         f"(V={cfg.vocab_size})")
    return model.eval()(tokens).float()


def write_floats(path, values):
    """Raw little-endian float32 (B*T*V for logits), written to PATH.tmp and renamed."""
    tmp = path + ".tmp"
    values.detach().numpy().astype("<f4").tofile(tmp)
    os.replace(tmp, path)


def cmd_read(args):
    model, notes, metadata = load_hf_gpt2(args.exported)
    # transformers' from_pretrained refuses a safetensors file without this (it names the framework)
    if metadata.get("format") != "pt":
        raise InputError(f"{args.exported}: __metadata__ {metadata} lacks \"format\": \"pt\", which transformers needs")
    tokens, _ = read_tokens(args.tokens)
    logits = logits_of(model, tokens)
    os.makedirs(args.out, exist_ok=True)
    out = os.path.join(args.out, "exported_logits.bin")
    write_floats(out, logits)
    for note in notes:
        print(f"{PROG}: {note}")
    print(f"{PROG}: wrote {out} ({'x'.join(map(str, logits.shape))} logits)")


# The model `write` stores. C = 128 gives n_head = 2 where the sizes are inferred (C / 64); the
# files with a config.json say 4 heads, so an importer that ignores config.json gets other logits.
# V = 1031 is odd and prime (no tile divides it) and above the C++ tool's V = 997, so that its
# tokens are this model's too. maxT = 32 leaves rows of wpe that the tokens do not reach.
WRITE_SIZES = dict(max_seq_len=32, vocab_size=1031, n_layer=2, n_embd=128)
WRITE_HEADS_WITH_CONFIG = 4

# The three files, as transformers writes them in three situations:
#   python_f32: GPT2LMHeadModel.save_pretrained in fp32 ("transformer." prefix, no lm_head.weight);
#   python_bf16: like GPT-2's released file (GPT2Model keys, no prefix, the causal-mask buffers in
#     fp32), in bf16 and without config.json, so the C++ side infers the sizes;
#   python_f16: GPT2LMHeadModel in fp16, with lm_head.weight written out (safe_serialization of
#     a model whose tie was dropped).
# The data goes in three orders, none of them the JSON's (sorted), so that a reader that follows
# the key order instead of the offsets reads the wrong bytes.
VARIANTS = [
    dict(name="python_f32", dtype="F32", prefix=True, lm_head=False, masks=False, config=True, order="model"),
    dict(name="python_bf16", dtype="BF16", prefix=False, lm_head=False, masks=True, config=False, order="reversed"),
    dict(name="python_f16", dtype="F16", prefix=True, lm_head=True, masks=False, config=True, order="by size"),
]


@torch.no_grad()
def random_parameters(model, seed):
    """Every tensor random and non-uniform, {key: float32 array in the file's (HF) orientation}:
    LayerNorm weights around 1, biases around 0, matrices at 1/sqrt(fan-in), each scaled by a factor
    that drifts along the tensor, so that a swapped, untransposed or shifted tensor changes the logits."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for key, param, transposed in hf_parameters(model):
        shape = tuple(reversed(param.shape)) if transposed else tuple(param.shape)
        n = math.prod(shape)
        drift = 0.5 + (torch.arange(n) % 97).float() / 97.0
        noise = (torch.randn(n, generator=gen) * drift).reshape(shape)
        if key.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            values = 1.0 + 0.2 * noise
        elif key.endswith("bias"):
            values = 0.1 * noise
        elif key in ("wte.weight", "wpe.weight"):
            values = 0.1 * noise
        else:
            values = noise / math.sqrt(shape[0])  # Conv1D (in, out): fan-in first
        out[key] = values.numpy().astype(np.float32)
    return out


def data_order(keys, order, sizes):
    if order == "model":
        return list(keys)
    if order == "reversed":
        return list(reversed(keys))
    return sorted(keys, key=lambda k: (sizes[k], k))  # smallest first


def write_config(path, cfg, dtype):
    """config.json as transformers writes it for GPT-2 (the fields a loader reads)."""
    config = {
        "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.0,
        "embd_pdrop": 0.0, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
        "n_embd": cfg.n_embd, "n_head": cfg.n_head, "n_inner": None, "n_layer": cfg.n_layer,
        "n_positions": cfg.max_seq_len, "resid_pdrop": 0.0, "scale_attn_weights": True,
        "tie_word_embeddings": True, "torch_dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype],
        "use_cache": True, "vocab_size": cfg.vocab_size,
    }
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    os.replace(path + ".tmp", path)


@torch.no_grad()
def write_variant(out_dir, variant, params, tokens):
    """One file of `params` as `variant` says, and the logits of the model holding exactly the
    stored (rounded) values. Returns (directory, logits path)."""
    heads = WRITE_HEADS_WITH_CONFIG if variant["config"] else WRITE_SIZES["n_embd"] // 64
    cfg = GPTConfig(n_head=heads, **WRITE_SIZES)
    model = GPT(cfg)
    dtype = variant["dtype"]
    stored = {key: rounded(dtype, values) for key, values in params.items()}
    for key, param, transposed in hf_parameters(model):
        param.copy_(torch.from_numpy(np.ascontiguousarray(stored[key].T if transposed else stored[key])))
    logits = logits_of(model, tokens)

    prefix = PREFIX if variant["prefix"] else ""
    tensors = {prefix + key: (dtype, values) for key, values in stored.items()}
    if variant["lm_head"]:
        tensors["lm_head.weight"] = (dtype, stored["wte.weight"])  # no prefix: it is not in the transformer
    if variant["masks"]:
        T = cfg.max_seq_len
        causal = np.tril(np.ones((T, T), dtype=np.float32)).reshape(1, 1, T, T)
        for i in range(cfg.n_layer):
            tensors[f"{prefix}h.{i}.attn.bias"] = ("F32", causal)
            tensors[f"{prefix}h.{i}.attn.masked_bias"] = ("F32", np.array(-1e4, dtype=np.float32))
    sizes = {k: np.size(v) for k, (_, v) in tensors.items()}
    order = data_order(list(tensors), variant["order"], sizes)
    directory = os.path.join(out_dir, variant["name"])
    os.makedirs(directory, exist_ok=True)
    write_safetensors(os.path.join(directory, "model.safetensors"), [(k, *tensors[k]) for k in order],
                      {"format": "pt"})
    config_path = os.path.join(directory, "config.json")
    if variant["config"]:
        write_config(config_path, cfg, dtype)
    elif os.path.exists(config_path):
        os.remove(config_path)  # from an older run: this variant must have none
    logits_path = os.path.join(out_dir, variant["name"] + "_logits.bin")
    write_floats(logits_path, logits)
    return directory, logits_path, logits


def write_all(out_dir, tokens, seed):
    params = random_parameters(GPT(GPTConfig(n_head=1, **WRITE_SIZES)), seed)
    return [write_variant(out_dir, variant, params, tokens) for variant in VARIANTS]


def cmd_write(args):
    tokens, meta = read_tokens(args.tokens)
    # the C++ tool's seed, so that one GPT_TEST_SEED reproduces the whole case
    seed = args.seed if args.seed is not None else int(meta.get("seed", 1)) % (1 << 63)
    for directory, logits_path, logits in write_all(args.out, tokens, seed):
        print(f"{PROG}: wrote {directory}/ and {logits_path} ({'x'.join(map(str, logits.shape))} logits, seed {seed})")


# ----------------------------------------------------------------------------------------
# Self-check


class SelfCheck:
    def __init__(self):
        self.failures = 0

    def expect(self, ok, what):
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        self.failures += 0 if ok else 1

    def refuses(self, path, fragment, what):
        """load_hf_gpt2(path) must raise an InputError whose one line mentions fragment."""
        try:
            load_hf_gpt2(path)
        except InputError as exc:
            message = str(exc)
            self.expect(fragment in message and "\n" not in message, f"{what}: {message}")
            return
        self.expect(False, f"{what}: accepted")


def raw_file(path, header, data=b""):
    """A file with exactly this header (a dict, or a str taken as is) and data."""
    text = (header if isinstance(header, str) else json.dumps(header)).encode("utf-8")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
    return path


@torch.no_grad()
def selfcheck():
    check = SelfCheck()
    with tempfile.TemporaryDirectory() as tmp:
        # The reader against bytes written by hand: 1.0, -2.0 and the smallest subnormal in each
        # format (so that a writer and a reader that agree on a wrong byte order cannot both pass).
        hand = raw_file(os.path.join(tmp, "hand.safetensors"), {
            "__metadata__": {"format": "pt"},
            "b": {"dtype": "BF16", "shape": [3], "data_offsets": [12, 18]},
            "a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
            "c": {"dtype": "F16", "shape": [1, 3], "data_offsets": [18, 24]},
        }, struct.pack("<3I", 0x3F800000, 0xC0000000, 0x00000001) + struct.pack("<3H", 0x3F80, 0xC000, 0x0001)
            + struct.pack("<3H", 0x3C00, 0xC000, 0x0001))
        tensors, metadata = read_safetensors(hand)
        check.expect(metadata == {"format": "pt"}, "metadata read")
        check.expect(np.array_equal(to_float32(tensors["a"]), np.array([1, -2, 2.0 ** -149], np.float32)),
                     "F32 read from hand-written bytes")
        check.expect(np.array_equal(to_float32(tensors["b"]), np.array([1, -2, 2.0 ** -133], np.float32)),
                     "BF16 read from hand-written bytes (subnormal included)")
        check.expect(np.array_equal(to_float32(tensors["c"]), np.array([[1, -2, 2.0 ** -24]], np.float32)),
                     "F16 read from hand-written bytes (subnormal included)")
        # bf16 rounding: to nearest, ties to even (1 + 2^-8 is halfway between 1 and 1 + 2^-7)
        halfway = np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 1 + 2.0 ** -8 + 2.0 ** -20], np.float32)
        check.expect(np.array_equal(rounded("BF16", halfway), np.array([1, 1 + 2.0 ** -6, 1 + 2.0 ** -7], np.float32)),
                     "BF16 rounds to nearest, ties to even")

        # writer -> reader: every variant loads back into a model with the very same logits
        g = torch.Generator().manual_seed(7)
        tokens = torch.randint(0, WRITE_SIZES["vocab_size"], (2, 20), generator=g)
        for (directory, _, logits), variant in zip(write_all(tmp, tokens, seed=3), VARIANTS):
            model, notes, _ = load_hf_gpt2(directory)
            again = logits_of(model, tokens)
            check.expect(torch.equal(again, logits), f"{variant['name']}: the same logits read back, bit for bit")
            check.expect(model.config.n_head == (WRITE_HEADS_WITH_CONFIG if variant["config"] else 2),
                         f"{variant['name']}: n_head {model.config.n_head}, from {notes[1].split(' from ')[1]}")
            stored, _ = read_safetensors(hf_model_file(directory))
            with open(hf_model_file(directory), "rb") as f:
                (header_len,) = struct.unpack("<Q", f.read(8))
            check.expect(header_len % 8 == 0, f"{variant['name']}: header padded to a multiple of 8 ({header_len})")
            dtypes = {s.dtype for k, s in stored.items() if not is_mask_buffer(k)}  # no prefix where there are masks
            check.expect(dtypes == {variant["dtype"]}, f"{variant['name']}: parameters stored as {dtypes}")
            if variant["masks"]:
                check.expect(sum("causal-mask" in n for n in notes) == 2 * WRITE_SIZES["n_layer"],
                             f"{variant['name']}: mask buffers ignored, and said so")
        # the rounding is what makes the variants differ: the bf16 model is not the fp32 one
        f32 = np.fromfile(os.path.join(tmp, "python_f32_logits.bin"), dtype="<f4")
        bf16 = np.fromfile(os.path.join(tmp, "python_bf16_logits.bin"), dtype="<f4")
        check.expect(not np.array_equal(f32, bf16), "bf16 and fp32 variants give different logits")

        # A model whose two square matrices are stored untransposed must not give the same logits:
        # the test's random parameters can tell the orientation apart.
        model, _, _ = load_hf_gpt2(os.path.join(tmp, "python_f32"))
        reference = logits_of(model, tokens)
        for block in model.blocks:
            block.attn.proj.weight.copy_(block.attn.proj.weight.T.clone())
        check.expect(not torch.allclose(logits_of(model, tokens), reference, rtol=1e-3, atol=1e-3),
                     "an untransposed c_proj changes the logits")

        # malformed files: each refused with one line naming the rule
        good, _ = read_safetensors(os.path.join(tmp, "python_f32", "model.safetensors"))
        bad = os.path.join(tmp, "bad")
        os.makedirs(bad)
        f = os.path.join(bad, "model.safetensors")
        one = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
        check.refuses(raw_file(f, {"x": one}, b"\0" * 4), "truncated", "data shorter than the offsets")
        check.refuses(raw_file(f, {"x": one}, b"\0" * 12), "the file holds 12", "bytes after the last tensor")
        check.refuses(raw_file(f, {"x": one, "y": {**one, "data_offsets": [12, 20]}}, b"\0" * 20), "a hole",
                      "a hole between tensors")
        check.refuses(raw_file(f, {"x": one, "y": {**one, "data_offsets": [4, 12]}}, b"\0" * 12), "an overlap",
                      "overlapping tensors")
        check.refuses(raw_file(f, {"x": {**one, "shape": [3]}}, b"\0" * 8), "offsets span", "shape against offsets")
        check.refuses(raw_file(f, {"x": {**one, "dtype": "F8"}}, b"\0" * 8), "unknown dtype", "unknown dtype")
        check.refuses(raw_file(f, '{"x": 1, "x": 2}'), "appears twice", "a key twice")
        check.refuses(raw_file(f, '{"x": '), "not JSON", "a cut header")
        with open(f, "wb") as out:
            out.write(struct.pack("<Q", 1 << 40) + b"{}")
        check.refuses(f, "only 2 after the length", "a header longer than the file")
        # the GPT-2 layer: a missing key, an unknown key, a wrong shape
        entries = [(k, "F32", to_float32(s)) for k, s in good.items()]
        write_safetensors(f, [e for e in entries if e[0] != PREFIX + "h.1.mlp.c_fc.bias"], {})
        check.refuses(f, "missing tensor 'h.1.mlp.c_fc.bias'", "a missing key")
        write_safetensors(f, entries + [("transformer.h.0.attn.extra", "F32", np.ones(3, np.float32))], {})
        check.refuses(f, "unknown tensor", "an unknown key")
        write_safetensors(f, [(k, d, v.T if k.endswith("c_proj.weight") and v.shape[0] != v.shape[1] else v)
                              for k, d, v in entries], {})
        check.refuses(f, "expected [512, 128]", "a Conv1D weight in nn.Linear's orientation")
        write_safetensors(f, entries + [("lm_head.weight", "F32", np.zeros((1031, 128), np.float32))], {})
        check.refuses(f, "lm_head.weight differs", "an untied LM head")

        # the command line: bad input is exit code 2 and one line on stderr
        import subprocess
        run = subprocess.run([sys.executable, os.path.abspath(__file__), "read", "--exported", bad, "--tokens",
                              os.path.join(tmp, "none.json"), "--out", tmp], capture_output=True, text=True)
        check.expect(run.returncode == 2 and run.stderr.count("\n") == 1,
                     f"read of a bad file: exit {run.returncode}, stderr {run.stderr.strip()!r}")
    print(f"{PROG}: self-check {'passed' if check.failures == 0 else f'FAILED ({check.failures})'}")
    return 0 if check.failures == 0 else 1


def main(argv=None):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    tokens_help = 'JSON {"batch": B, "seq": T, "file": NAME}, NAME beside it holding B*T int32 ids'
    read = sub.add_parser("read", help="load an exported model.safetensors into model.py's GPT; its logits")
    read.add_argument("--exported", required=True, help="directory with model.safetensors and config.json")
    read.add_argument("--tokens", required=True, help=tokens_help)
    read.add_argument("--out", required=True, help="directory for exported_logits.bin (float32, B*T*V)")
    write = sub.add_parser("write", help="a random GPT-2 in three files as transformers writes them, and logits")
    write.add_argument("--tokens", required=True, help=tokens_help + " (every id below 1031)")
    write.add_argument("--out", required=True, help="directory for python_{f32,bf16,f16}/ and python_*_logits.bin")
    write.add_argument("--seed", type=int, help="parameters' seed (default: the tokens JSON's \"seed\")")
    sub.add_parser("selfcheck", help="writer -> reader round trip, hand-written bytes, malformed files")
    args = parser.parse_args(argv)
    torch.set_num_threads(min(2, torch.get_num_threads()))  # a small model; CI machines have two cores
    try:
        if args.command == "selfcheck":
            return selfcheck()
        if args.command == "read":
            cmd_read(args)
        else:
            cmd_write(args)
    except InputError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
