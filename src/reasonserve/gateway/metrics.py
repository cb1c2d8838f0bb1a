"""The gateway's Prometheus ``/metrics`` (text format 0.0.4), observed on the event loop only.

Counters: requests by endpoint and HTTP status class, program exits by reason
(``early``, ``finished``, ``budget``, ``error``, ``cancelled``, ``timeout``),
probes sent, probe tokens and the probe prompt tokens the upstream computed (its prefix
cache missed), reasoning and completion tokens, every token the programs decoded, tokens
saved. Gauge: programs in flight. Histograms: upstream request latency (each chunk,
probe, sample or stream) and program latency.
"""

from __future__ import annotations

from collections import Counter

from reasonserve.serve.metrics import Histogram

__all__ = ["GatewayMetrics"]

_P = "reasonserve:gateway_"
_TOKEN_COUNTERS = (
    ("probes_total", "Probes sent upstream."),
    ("probe_tokens_total", "Tokens decoded by probes."),
    (
        "probe_prompt_tokens_computed_total",
        "Probe prompt tokens the upstream computed (prefix-cache misses).",
    ),
    ("reasoning_tokens_total", "Reasoning tokens of the returned outputs."),
    ("completion_tokens_total", "Model tokens of the returned outputs (reasoning and answer)."),
    ("program_tokens_total", "Every token the programs decoded (probes and unchosen samples included)."),
    ("tokens_saved_total", "Tokens the programs' budgets allowed but early exits did not spend."),
)


class GatewayMetrics:
    def __init__(self) -> None:
        self.requests: Counter[tuple[str, str]] = Counter()  # (endpoint, status class) -> requests
        self.exits: Counter[tuple[str, str]] = Counter()  # (program, exit reason) -> programs
        self.tokens: Counter[str] = Counter()
        self.upstream = Histogram(_P + "upstream_request_seconds", "Latency of one upstream request.")
        self.program = Histogram(_P + "program_seconds", "Latency of one program, admission to its end.")

    def observe_request(self, endpoint: str, status: int) -> None:
        self.requests[(endpoint, f"{status // 100}xx")] += 1

    def observe_exit(self, program: str, reason: str, elapsed_s: float, tokens: dict[str, int]) -> None:
        self.exits[(program, reason)] += 1
        self.program.observe(elapsed_s)
        for name, value in tokens.items():
            self.tokens[name] += value

    def render(self, programs_running: int) -> str:
        lines = [
            f"# HELP {_P}programs_running Programs in flight.",
            f"# TYPE {_P}programs_running gauge",
            f"{_P}programs_running {programs_running}",
            f"# HELP {_P}requests_total HTTP generation requests by endpoint and status class.",
            f"# TYPE {_P}requests_total counter",
        ]
        lines += [
            f'{_P}requests_total{{endpoint="{e}",status="{s}"}} {n}'
            for (e, s), n in sorted(self.requests.items())
        ]
        lines += [
            f"# HELP {_P}exits_total Programs ended, by program and exit reason.",
            f"# TYPE {_P}exits_total counter",
        ]
        lines += [
            f'{_P}exits_total{{program="{p}",reason="{r}"}} {n}' for (p, r), n in sorted(self.exits.items())
        ]
        for name, help_text in _TOKEN_COUNTERS:
            lines += [
                f"# HELP {_P}{name} {help_text}",
                f"# TYPE {_P}{name} counter",
                f"{_P}{name} {self.tokens[name]}",
            ]
        return "\n".join([*lines, *self.upstream.render(), *self.program.render()]) + "\n"
