"""Phase-aware admission for SGLang through its plugin hook registry (after PASCAL).

reasonserve registers :func:`register` under SGLang's ``sglang.srt.plugins``
entry-point group; SGLang calls it in each of its processes at start-up. It does
nothing unless ``REASONSERVE_SGLANG_PHASE_AWARE`` holds the settings as JSON
(``{"think_end_token_id": ID}``, optionally ``quantum`` and
``demote_threshold_tokens``), so installing reasonserve never changes a server
that did not ask. With the settings, it registers an AFTER hook on
``SchedulePolicy.calc_priority``: once SGLang has ordered its waiting queue with its
own policy (FCFS, LPM, priorities...), the hook moves every request of PASCAL's high
queue (prefill or reasoning, not demoted) ahead of the low queue (answering — a
retracted request that had closed its thinking — or reasoning past the demotion
threshold), keeping SGLang's order inside each queue (a stable sort).

Version-gated: it registers only on SGLang >= 0.5.23 (the version its contract tests
run against) that has the hook registry and the schedule-policy module, and logs why
otherwise. Only admission is phase-aware: which running request SGLang
retracts when memory runs out is still SGLang's choice.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import time
from collections.abc import Mapping
from importlib import metadata

from reasonserve.adapters.phase_book import PhaseAwareConfig, PhaseBook
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["ENV_SETTINGS", "MIN_VERSION", "TARGET", "PhaseAwareHook", "register"]

ENV_SETTINGS = "REASONSERVE_SGLANG_PHASE_AWARE"
TARGET = "sglang.srt.managers.schedule_policy.SchedulePolicy.calc_priority"
MIN_VERSION = (0, 5, 23)
_log = logging.getLogger(__name__)


class PhaseAwareHook:
    """The AFTER hook: ``hook(result, schedule_policy, waiting_queue, ...)`` reorders
    ``waiting_queue`` in place."""

    def __init__(self, config: PhaseAwareConfig) -> None:
        self.book = PhaseBook(config)
        self.policy = config.policy()

    def __call__(self, result, schedule_policy=None, waiting_queue=None, *args, **kwargs):
        queue = kwargs.get("waiting_queue", waiting_queue)
        if not queue:
            return None
        now_s = time.time()
        queue.sort(key=lambda req: self.policy.queue(self._view(req, now_s)))
        self.book.retain({req.rid for req in queue})
        return None

    def _view(self, req, now_s: float):
        prompt = len(req.origin_input_ids)
        return self.book.view(req.rid, arrival_s=now_s, num_prompt_tokens=prompt, num_computed_tokens=0,
                              output_ids=req.output_ids, running=False, now_s=now_s)  # fmt: skip


def register(environ: Mapping[str, str] | None = None) -> bool:
    """The ``sglang.srt.plugins`` entry point. True when the hook was registered."""
    raw = (os.environ if environ is None else environ).get(ENV_SETTINGS)
    if not raw:
        return False
    config = _settings(raw)
    reason = _unsupported()
    if reason is not None:
        _log.warning("reasonserve phase-aware scheduling not enabled: %s", reason)
        return False
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(TARGET, PhaseAwareHook(config), HookType.AFTER)
    _log.info("reasonserve phase-aware admission hooked on %s", TARGET)
    return True


def _settings(raw: str) -> PhaseAwareConfig:
    try:
        value = json.loads(raw)
    except ValueError as err:
        example = '{"think_end_token_id": 151668}'
        raise InvalidArgumentError(f"{ENV_SETTINGS} must be JSON like {example}: {err}") from None
    return PhaseAwareConfig.from_mapping(value)


def _unsupported() -> str | None:
    """Why this SGLang cannot take the hook, or None."""
    try:
        version = metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return "SGLang is not installed"
    numbers = tuple(int(n) for n in re.findall(r"\d+", version)[:3])
    if numbers < MIN_VERSION:
        return f"SGLang {version} is older than {'.'.join(map(str, MIN_VERSION))}"
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry  # noqa: F401
    except ImportError as err:
        return f"SGLang {version} has no plugin hook registry ({err})"
    # Located, not imported: SGLang imports its scheduler in the scheduler process; a
    # target that does not resolve there is logged by HookRegistry.apply_hooks.
    if importlib.util.find_spec(TARGET.rsplit(".", 2)[0]) is None:
        return f"SGLang {version} has no {TARGET.rsplit('.', 2)[0]}"
    return None
