"""Prometheus ``/metrics`` in the text exposition format (version 0.0.4), vLLM-style names.

Engine gauges and counters come from the runner's latest ``Engine.metrics()`` snapshot;
per-request counters and latency histograms are observed by the HTTP side when a
choice ends (updated on the event loop only, so no lock).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter

from reasonserve.engine.metrics import EngineMetrics

__all__ = ["Histogram", "ServerMetrics"]

_LATENCY_BUCKETS_S = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
_P = "reasonserve:"


class Histogram:
    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...] = _LATENCY_BUCKETS_S) -> None:
        self.name, self.help, self.buckets = name, help_text, buckets
        self.counts = [0] * (len(buckets) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        if math.isfinite(value):
            self.counts[bisect.bisect_left(self.buckets, value)] += 1
            self.total += value

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        running = 0
        for bound, count in zip((*self.buckets, math.inf), self.counts, strict=True):
            running += count
            le = "+Inf" if bound == math.inf else repr(bound)
            lines.append(f'{self.name}_bucket{{le="{le}"}} {running}')
        return [*lines, f"{self.name}_sum {self.total!r}", f"{self.name}_count {running}"]


class ServerMetrics:
    def __init__(self) -> None:
        self.finished: Counter[str] = Counter()  # finished_reason -> requests (choices)
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.ttft = Histogram(_P + "time_to_first_token_seconds", "Time to first token (server side).")
        self.tpot = Histogram(
            _P + "time_per_output_token_seconds", "Mean time per output token after the first."
        )
        self.e2e = Histogram(_P + "e2e_request_latency_seconds", "Request latency from arrival to end.")
        self.ttfat = Histogram(
            _P + "time_to_first_answer_token_seconds", "Time to the first token after end-of-thinking."
        )

    def observe_choice(
        self,
        reason: str,
        prompt_tokens: int,
        output_tokens: int,
        ttft_s: float | None,
        e2e_s: float,
        ttfat_s: float | None,
    ) -> None:
        self.finished[reason] += 1
        self.prompt_tokens += prompt_tokens
        self.generation_tokens += output_tokens
        self.e2e.observe(e2e_s)
        if ttft_s is not None:
            self.ttft.observe(ttft_s)
            if output_tokens > 1:
                self.tpot.observe((e2e_s - ttft_s) / (output_tokens - 1))
        if ttfat_s is not None:
            self.ttfat.observe(ttfat_s)

    def render(self, s: EngineMetrics, num_queued: int) -> str:
        lines = []
        for name, kind, value, help_text in (
            ("num_requests_running", "gauge", s.num_running, "Requests in the running batch."),
            ("num_requests_waiting", "gauge", s.num_waiting, "Requests waiting for admission."),
            (
                "num_requests_queued",
                "gauge",
                num_queued,
                "Engine requests accepted by the server and not ended.",
            ),
            ("kv_cache_blocks_used", "gauge", s.kv_blocks_used, "KV cache blocks in use."),
            ("kv_cache_blocks_total", "gauge", s.kv_blocks_total, "KV cache blocks in all."),
            (
                "kv_cache_usage_perc",
                "gauge",
                s.kv_blocks_used / max(s.kv_blocks_total, 1),
                "KV cache usage (0-1).",
            ),
            ("num_preemptions_total", "counter", s.num_preemptions, "Preemptions (engine, cumulative)."),
            ("dvr_verify_passes_total", "counter", s.verify_passes, "Decode-verify-rollback verify passes."),
            ("dvr_rollbacks_total", "counter", s.rollbacks, "Verify passes that rolled tokens back."),
            ("dvr_tokens_rolled_back_total", "counter", s.tokens_rolled_back, "Tokens rolled back."),
            ("prompt_tokens_total", "counter", self.prompt_tokens, "Prompt tokens of ended requests."),
            (
                "generation_tokens_total",
                "counter",
                self.generation_tokens,
                "Generated tokens of ended requests.",
            ),
        ):
            lines += [f"# HELP {_P}{name} {help_text}", f"# TYPE {_P}{name} {kind}", f"{_P}{name} {value}"]
        lines += [
            f"# HELP {_P}request_success_total Ended requests (choices) by finished_reason.",
            f"# TYPE {_P}request_success_total counter",
        ]
        for reason in sorted({"stop", "length", "abort", "error", *self.finished}):
            lines.append(f'{_P}request_success_total{{finished_reason="{reason}"}} {self.finished[reason]}')
        for hist in (self.ttft, self.tpot, self.e2e, self.ttfat):
            lines += hist.render()
        return "\n".join(lines) + "\n"
