"""A Llama / Qwen2 / Qwen3 decoder computed through ``reasonserve.ops``.

Because every op it uses is batch-invariant (and the torch attention reference is even
invariant to how many queries are computed together), a token's logits do not depend
on which other sequences or tokens share the forward pass. RoPE tables are built once
for all positions at load time and indexed, so no transcendental is evaluated on a
batch-dependent tensor (``engine/rope.py`` builds them for every RoPE type). Qwen3's
per-head q/k RMSNorm runs before RoPE, as in ``transformers``.

Shapes: ``H`` hidden size, ``Hq``/``Hkv`` query/KV heads, ``D`` head dim, ``V`` vocab.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

import torch

from reasonserve import ops
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.engine.checkpoint import load_weights
from reasonserve.engine.config import ModelConfig
from reasonserve.engine.device import resolve_device, resolve_dtype
from reasonserve.engine.kernels import INVARIANT, Kernels, PagedMeta
from reasonserve.engine.rope import rope_tables
from reasonserve.engine.step_inputs import DeviceStep, check_step

__all__ = ["DecoderModel", "SequenceBatch"]


@dataclass(frozen=True)
class SequenceBatch:
    """One forward pass over several sequences, each extending its own cached prefix.

    ``new_tokens[i]``: token ids to run for sequence ``i`` (prefill chunk or one decode
    token); ``start[i]``: position of the first of them (= tokens already cached).
    ``cache[i]``: ``(k, v)`` of the already-cached prefix, each
    ``[layers, Hkv, start[i], D]`` (empty when ``start[i] == 0``).
    """

    new_tokens: list[torch.Tensor]
    start: list[int]
    cache: list[tuple[torch.Tensor, torch.Tensor] | None]


class DecoderModel:
    """Weights plus a functional forward; the KV layout is the caller's (see engine)."""

    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor], *, dtype=None, device="cpu"):
        """``device``: "cpu", "cuda" or "cuda:N"; ``dtype``: float32, bfloat16, float16 (or
        their names; None: float32 on CPU, bfloat16 on CUDA). See ``engine/device.py``."""
        self.cfg = cfg
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        dtype = self.dtype
        w = {k: v.to(device=self.device, dtype=dtype) for k, v in weights.items()}
        # K-major projection weights: batch-invariant linear runs near stock speed on them.
        self.w = {k: ops.k_major(v) if v.dim() == 2 and "embed" not in k else v for k, v in w.items()}
        self.embed = w["model.embed_tokens.weight"]
        self.lm_head = self.w["model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"]
        if cfg.tie_word_embeddings:
            self.lm_head = ops.k_major(self.embed)
        self.fused = _fused_weights(cfg, w)
        self.cos, self.sin = rope_tables(
            cfg.rope, cfg.head_dim, cfg.max_context_len, dtype=self.dtype, device=self.device
        )

    @classmethod
    def from_pretrained(cls, path: str | pathlib.Path, **kwargs) -> DecoderModel:
        cfg = ModelConfig.from_pretrained(path)
        return cls(cfg, load_weights(path, cfg), **kwargs)

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``x [heads, S, D]`` rotated by the positions' angles (HF ``rotate_half`` convention)."""
        return _rotate(x, self.cos[positions], self.sin[positions])

    def _linear(self, kern: Kernels, x: torch.Tensor, name: str) -> torch.Tensor:
        return kern.linear(x, self.w[name + ".weight"], self.w.get(name + ".bias"))

    def forward(
        self, batch: SequenceBatch, *, kernels: Kernels = INVARIANT
    ) -> tuple[list[torch.Tensor], list[tuple[torch.Tensor, torch.Tensor]]]:
        """Logits ``[n_i, V]`` for each sequence's new tokens, and each sequence's new
        ``(k, v)`` (``[layers, Hkv, n_i, D]``) for the caller to append to its cache.

        Row-wise work (norms, projections, MLP) runs on all sequences' tokens at once;
        attention runs per sequence over its own keys. ``kernels`` picks the
        batch-invariant ops (default) or stock torch (the DVR fast path).
        """
        self._check(batch)
        sizes = [t.numel() for t in batch.new_tokens]
        h = self.embed[torch.cat(batch.new_tokens).to(self.device)]  # [N, H]
        positions = torch.cat([torch.arange(s, s + n) for s, n in zip(batch.start, sizes, strict=True)])
        new_kv: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in sizes]
        for layer in range(self.cfg.num_hidden_layers):
            h = self._attention_block(kernels, h, positions.to(self.device), sizes, batch, layer, new_kv)
            p = f"model.layers.{layer}."
            x = kernels.rms_norm(h, self.w[p + "post_attention_layernorm.weight"], self.cfg.rms_norm_eps)
            h = h + self._mlp(kernels, x, p)
        normed = kernels.rms_norm(h, self.w["model.norm.weight"], self.cfg.rms_norm_eps)
        logits = kernels.linear(normed, self.lm_head)
        stacked = [(torch.stack([k for k, _ in kv]), torch.stack([v for _, v in kv])) for kv in new_kv]
        return list(logits.split(sizes)), stacked

    def _attention_block(self, kern: Kernels, h, positions, sizes, batch, layer: int, new_kv) -> torch.Tensor:
        cfg, p = self.cfg, f"model.layers.{layer}."
        x = kern.rms_norm(h, self.w[p + "input_layernorm.weight"], cfg.rms_norm_eps)
        n = x.shape[0]
        q = (
            self._linear(kern, x, p + "self_attn.q_proj")
            .view(n, cfg.num_attention_heads, cfg.head_dim)
            .transpose(0, 1)
        )
        k = (
            self._linear(kern, x, p + "self_attn.k_proj")
            .view(n, cfg.num_key_value_heads, cfg.head_dim)
            .transpose(0, 1)
        )
        v = (
            self._linear(kern, x, p + "self_attn.v_proj")
            .view(n, cfg.num_key_value_heads, cfg.head_dim)
            .transpose(0, 1)
        )
        q, k = self._qk_norm(kern, q, k, p)
        q, k = self._rope(q, positions), self._rope(k, positions)
        outs = []
        for i, (qs, ks, vs) in enumerate(
            zip(q.split(sizes, 1), k.split(sizes, 1), v.split(sizes, 1), strict=True)
        ):
            new_kv[i].append((ks, vs))
            cached = batch.cache[i]
            if cached is not None and batch.start[i]:
                ks = torch.cat([cached[0][layer], ks], dim=1)
                vs = torch.cat([cached[1][layer], vs], dim=1)
            outs.append(kern.attention(qs, ks, vs))  # [Hq, n_i, D]
        attn = torch.cat(outs, dim=1).transpose(0, 1).reshape(n, -1)
        return h + self._linear(kern, attn, p + "self_attn.o_proj")

    def forward_paged(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        meta: PagedMeta,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        *,
        kernels: Kernels = INVARIANT,
        logit_rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One packed forward over the paged cache: ``input_ids``/``positions`` ``[N]``
        (sequences packed in order, see :class:`PagedMeta`); each layer writes the new
        K/V into ``k_cache``/``v_cache`` ``[layers, blocks, Hkv, block_size, D]`` with one
        indexed copy and attends through the block tables. Returns the logits of
        ``logit_rows`` (all rows when None), ``[len(logit_rows), V]``.

        Dtypes, devices and shapes are checked here (typed errors naming the argument);
        index values are not read back from the device: build the inputs with
        ``step_inputs.pack``, which checks them on the host."""
        cfg = self.cfg
        cache_shape = (cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim)
        step = DeviceStep(input_ids, positions, meta, logit_rows)
        check_step(step, k_cache, v_cache, device=self.device, dtype=self.dtype, cache_shape=cache_shape)
        h = self.embed[input_ids]
        cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]
        x = kernels.rms_norm(h, self.w["model.layers.0.input_layernorm.weight"], cfg.rms_norm_eps)
        for layer in range(cfg.num_hidden_layers):
            p = f"model.layers.{layer}."
            delta = self._paged_attention(kernels, x, cos, sin, meta, k_cache[layer], v_cache[layer], p)
            norm = self.w[p + "post_attention_layernorm.weight"]
            h, x = kernels.add_rms_norm(h, delta, norm, cfg.rms_norm_eps)
            h, x = kernels.add_rms_norm(h, self._mlp(kernels, x, p), self._next_norm(layer), cfg.rms_norm_eps)
        if logit_rows is not None:
            x = x[logit_rows]
        return kernels.linear(x, self.lm_head)

    def _next_norm(self, layer: int) -> torch.Tensor:
        """The norm that follows layer ``layer``'s residual stream: the next layer's input norm
        or the final one."""
        last = layer + 1 == self.cfg.num_hidden_layers
        return self.w["model.norm.weight" if last else f"model.layers.{layer + 1}.input_layernorm.weight"]

    def _paged_attention(self, kern: Kernels, x, cos, sin, meta: PagedMeta, k_cache, v_cache, p: str):
        """The attention sublayer's output (before the residual add) for normed ``x [N, H]``."""
        cfg, n = self.cfg, x.shape[0]
        hq, hkv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        if kern.fused:  # one projection for q, k and v (stock kernels only: bits may differ)
            q, k, v = kern.linear(x, *self.fused[p + "qkv"]).split([hq * d, hkv * d, hkv * d], dim=-1)
        else:
            q, k, v = (self._linear(kern, x, p + f"self_attn.{name}_proj") for name in "qkv")
        q, k = self._qk_norm(kern, q.reshape(n, hq, d), k.reshape(n, hkv, d), p)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        k_cache[meta.slot_blocks, :, meta.slot_offsets] = k
        v_cache[meta.slot_blocks, :, meta.slot_offsets] = v.reshape(n, hkv, d)
        attn = kern.paged_attention(q, k_cache, v_cache, meta).reshape(n, -1)
        return self._linear(kern, attn, p + "self_attn.o_proj")

    def _qk_norm(self, kern: Kernels, q, k, p: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Qwen3: RMSNorm of each head's query and key over ``head_dim`` (``[..., D]``)."""
        if not self.cfg.qk_norm:
            return q, k
        eps = self.cfg.rms_norm_eps
        qn = kern.rms_norm(q.reshape(-1, q.shape[-1]), self.w[p + "self_attn.q_norm.weight"], eps)
        kn = kern.rms_norm(k.reshape(-1, k.shape[-1]), self.w[p + "self_attn.k_norm.weight"], eps)
        return qn.view(q.shape), kn.view(k.shape)

    def _mlp(self, kern: Kernels, x: torch.Tensor, p: str) -> torch.Tensor:
        """The MLP sublayer's output (before the residual add) for normed ``x``."""
        if kern.fused:
            gate, up = kern.linear(x, *self.fused[p + "gate_up"]).chunk(2, dim=-1)
        else:
            gate, up = self._linear(kern, x, p + "mlp.gate_proj"), self._linear(kern, x, p + "mlp.up_proj")
        return self._linear(kern, kern.silu(gate) * up, p + "mlp.down_proj")

    def _check(self, batch: SequenceBatch) -> None:
        if not (len(batch.new_tokens) == len(batch.start) == len(batch.cache)):
            raise InvalidArgumentError("new_tokens, start and cache must have one entry per sequence")
        for tokens, start in zip(batch.new_tokens, batch.start, strict=True):
            if tokens.dim() != 1 or tokens.numel() == 0:
                raise InvalidArgumentError("each sequence needs a non-empty 1-D tensor of new tokens")
            if int(tokens.min()) < 0 or int(tokens.max()) >= self.cfg.vocab_size:
                raise InvalidArgumentError(f"token ids must lie in [0, {self.cfg.vocab_size})")
            if start + tokens.numel() > self.cfg.max_context_len:
                raise InvalidArgumentError(
                    f"sequence longer than the model's context ({self.cfg.max_context_len})"
                )


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE with the HF ``rotate_half`` convention; ``cos``/``sin`` broadcast against ``x``."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


def _fused_weights(
    cfg: ModelConfig, w: dict[str, torch.Tensor]
) -> dict[str, tuple[torch.Tensor, torch.Tensor | None]]:
    """Concatenated q/k/v and gate/up projections (K-major) for the stock kernels."""
    out: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}
    for layer in range(cfg.num_hidden_layers):
        p = f"model.layers.{layer}."
        attn = [p + f"self_attn.{name}_proj" for name in "qkv"]
        bias = torch.cat([w[a + ".bias"] for a in attn]) if cfg.qkv_bias else None
        out[p + "qkv"] = (ops.k_major(torch.cat([w[a + ".weight"] for a in attn])), bias)
        mlp = [p + "mlp.gate_proj", p + "mlp.up_proj"]
        out[p + "gate_up"] = (
            ops.k_major(torch.cat([w[m + ".weight"] for m in mlp])),
            torch.cat([w[m + ".bias"] for m in mlp]) if cfg.mlp_bias else None,
        )
    return out
