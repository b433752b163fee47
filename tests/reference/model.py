"""GPT-2 in PyTorch: the model of the PyTorch reference, and nothing else.

Exactly the model the C++ trainers implement (docs/formats.md): learned token and position
embeddings, pre-LayerNorm transformer blocks (causal self-attention, then an MLP with the
tanh approximation of GELU), a final LayerNorm, and an output projection that reuses the
token embedding. LayerNorm eps is 1e-5 and there is no dropout, so a training step is a
deterministic function of the parameters and the batch.

Reading checkpoints and token shards, the optimizer and the command line live in
gpt2_reference.py, which imports this file.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    # The sizes come from a checkpoint's header (written by the C++ tool gpt_init), so that the
    # named sizes (d12 = GPT-2 124M, ...) are defined in one place: common/model/config.cpp.
    max_seq_len: int  # maxT: rows of the position embedding, the longest sequence
    vocab_size: int   # V: 50257 for GPT-2
    n_layer: int      # L: transformer blocks
    n_head: int       # H: attention heads
    n_embd: int       # C: width of the residual stream; each head has C / H of it


class CausalSelfAttention(nn.Module):
    def __init__(self, config, attention):
        super().__init__()
        self.n_head = config.n_head
        self.attention = attention  # "manual" or "sdpa"
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)  # output columns are [q | k | v]
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        if attention == "manual":
            # True where query t may look at key s (s <= t). Not saved with the module.
            T = config.max_seq_len
            self.register_buffer("causal_mask", torch.tril(torch.ones(T, T, dtype=torch.bool)), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        Q = C // self.n_head  # head size
        q, k, v = self.qkv(x).split(C, dim=2)
        # (B, T, C) -> (B, H, T, Q): head h owns columns h*Q .. (h+1)*Q-1 of q, k and v
        q = q.view(B, T, self.n_head, Q).transpose(1, 2)
        k = k.view(B, T, self.n_head, Q).transpose(1, 2)
        v = v.view(B, T, self.n_head, Q).transpose(1, 2)
        if self.attention == "sdpa":
            # one fused kernel (flash attention on a GPU); its default scale is 1/sqrt(Q) too
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            # the whole T x T score matrix, masked so that no position sees the future
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(Q))
            scores = scores.masked_fill(~self.causal_mask[:T, :T], float("-inf"))
            y = F.softmax(scores, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side again
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.gelu = nn.GELU(approximate="tanh")  # GPT-2 used the tanh approximation
        self.proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x):
        return self.proj(self.gelu(self.fc(x)))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, config, attention):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd, eps=1e-5)
        self.attn = CausalSelfAttention(config, attention)
        self.ln2 = nn.LayerNorm(config.n_embd, eps=1e-5)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """attention: "manual" (the T x T matrix) or "sdpa" (PyTorch's fused attention).
    padded_vocab: rows of the token embedding, when it is padded beyond vocab_size (the extra
    rows are never a target, and their logits are cut off before the loss)."""

    def __init__(self, config, attention="manual", padded_vocab=None):
        super().__init__()
        self.config = config
        self.padded_vocab = padded_vocab or config.vocab_size
        self.wte = nn.Embedding(self.padded_vocab, config.n_embd)
        self.wpe = nn.Embedding(config.max_seq_len, config.n_embd)
        self.blocks = nn.ModuleList(Block(config, attention) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=1e-5)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        # Tied output projection: the logits reuse the token embedding matrix.
        logits = F.linear(x, self.wte.weight)
        if self.padded_vocab != self.config.vocab_size:
            # Slice the padded columns off: exactly like masking them to -inf, they get no
            # probability mass and a zero gradient, so the loss is that of the unpadded model.
            logits = logits[..., : self.config.vocab_size]
        if targets is None:
            return logits
        # mean over the B*T positions, in fp32 even when the logits come out of bf16 matmuls
        return F.cross_entropy(logits.reshape(B * T, -1).float(), targets.reshape(B * T))
