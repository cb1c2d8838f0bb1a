"""Length tables from the real recordings in ``../shared/data`` (read at run time, never
copied into the repository; see that folder's README for sources and licences).

* ``servegen``: Alibaba's production DeepSeek-R1 workload (ServeGen): per-window
  distributions of input tokens, output tokens and the reasoning share of the output.
  The three marginals are sampled independently (the dataset publishes no joint).
* ``qwen3``: 456 full Qwen3-8B reasoning texts; the split between reasoning and answer
  is the character share before ``</think>`` applied to ``tokens_used``. Traces that
  never close ``</think>`` (token cap) are kept as all-reasoning with a 1-token answer.
"""

from __future__ import annotations

import ast
import bisect
import gzip
import json
import pathlib
import random

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.sim.workloads.requests import LengthTable

__all__ = ["load_lengths"]


def _cdf_draw(dist: dict, rng: random.Random, n: int) -> list[float]:
    keys = sorted(k for k, p in dist.items() if p > 0)
    acc, cum = 0.0, []
    for k in keys:
        acc += dist[k]
        cum.append(acc)
    return [keys[min(bisect.bisect_left(cum, rng.random() * acc), len(keys) - 1)] for _ in range(n)]


def _servegen(path: pathlib.Path, chunk: int, window: str, n: int, seed: int) -> LengthTable:
    data = json.loads((path / f"chunk-{chunk}-dataset.json").read_text())[window]
    dists = {k: ast.literal_eval(data[k]) for k in ("input_tokens", "output_tokens", "reason_ratio")}
    rng = random.Random(seed)
    inputs, outputs = _cdf_draw(dists["input_tokens"], rng, n), _cdf_draw(dists["output_tokens"], rng, n)
    ratios = _cdf_draw(dists["reason_ratio"], rng, n)
    rows = []
    for i, o, r in zip(inputs, outputs, ratios, strict=True):
        reasoning = min(int(o) - 1, round(o * r))
        rows.append((max(1, int(i)), max(0, reasoning), int(o) - max(0, reasoning)))
    return LengthTable(tuple(rows), f"servegen chunk-{chunk} window {window}")


def _qwen3(path: pathlib.Path, prompt_tokens: int) -> LengthTable:
    rows = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            text, used = rec["full_text"], int(rec["tokens_used"])
            cut = text.find("</think>")
            reasoning = used - 1 if cut < 0 else max(1, round(used * (cut + len("</think>")) / len(text)))
            rows.append((prompt_tokens, reasoning, max(1, used - reasoning)))
    return LengthTable(tuple(rows), f"qwen3-8b full texts ({path.name})")


def load_lengths(
    source: str, data_dir: str | pathlib.Path, *, seed: int = 0, num_rows: int = 20_000,
    servegen_chunk: int = 0, servegen_window: str = "0", prompt_tokens: int = 128,
) -> LengthTable:  # fmt: skip
    """A length table from ``source`` (``"servegen"`` or ``"qwen3"``) under ``data_dir``."""
    root = pathlib.Path(data_dir)
    if source == "servegen":
        folder = root / "serving_traces" / "servegen_deepseek_r1"
        if not folder.is_dir():
            raise InvalidArgumentError(f"data_dir has no serving_traces/servegen_deepseek_r1: {root}")
        return _servegen(folder, servegen_chunk, servegen_window, num_rows, seed)
    if source == "qwen3":
        path = root / "reasoning_traces" / "qwen3-8b_fulltext_dev_split.jsonl.gz"
        if not path.is_file():
            raise InvalidArgumentError(f"data_dir has no {path.relative_to(root)}: {root}")
        return _qwen3(path, prompt_tokens)
    raise InvalidArgumentError(f"source must be 'servegen' or 'qwen3', got {source!r}")
