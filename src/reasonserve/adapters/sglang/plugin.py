"""Phase-aware admission for SGLang through its plugin hook registry (after PASCAL).

reasonserve registers :func:`register` under SGLang's ``sglang.srt.plugins``
entry-point group; SGLang calls it in each of its processes at start-up. It does
nothing unless ``REASONSERVE_SGLANG_PHASE_AWARE`` holds the settings as JSON
(``{"think_end_token_id": ID}``, optionally ``demote_threshold_tokens``), so
installing reasonserve never changes a server that did not ask. There is no
``quantum``: the hook orders admission only, and a quantum rotates running requests
(the settings refuse it). With the settings, it registers an AFTER hook on
``SchedulePolicy.calc_priority``: once SGLang has ordered its waiting queue with its
own policy (FCFS, LPM, priorities...), the hook moves every request of PASCAL's high
queue (prefill or reasoning, not demoted) ahead of the low queue (answering — a
retracted request that had closed its thinking — or reasoning past the demotion
threshold), keeping SGLang's order inside each queue (a stable sort).

Never the reason SGLang fails to start: this module imports only the standard library
at import time (and reasonserve's package root: torch, which SGLang has loaded), and
:func:`register` turns every failure (bad settings, an SGLang outside [0.5.23, 0.6)
or without the hook registry, an import error) into one logged warning and ``False``,
leaving SGLang as if the plugin were absent. Only admission is phase-aware: which
running request SGLang retracts when memory runs out is still SGLang's choice.
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

__all__ = ["ENV_SETTINGS", "MAX_VERSION", "MIN_VERSION", "TARGET", "PhaseAwareHook", "register"]

ENV_SETTINGS = "REASONSERVE_SGLANG_PHASE_AWARE"
TARGET = "sglang.srt.managers.schedule_policy.SchedulePolicy.calc_priority"
MIN_VERSION, MAX_VERSION = (0, 5, 23), (0, 6, 0)  # supported: [MIN_VERSION, MAX_VERSION)
_log = logging.getLogger(__name__)


class PhaseAwareHook:
    """The AFTER hook: ``hook(result, schedule_policy, waiting_queue, ...)`` reorders
    ``waiting_queue`` in place."""

    def __init__(self, config) -> None:
        from reasonserve.adapters.phase_book import PhaseBook

        self.book = PhaseBook(config)
        self.policy = config.policy()

    def __call__(self, result, schedule_policy=None, waiting_queue=None, *args, **kwargs):
        queue = kwargs.get("waiting_queue", waiting_queue)
        if not queue:
            return None
        now_s = time.time()
        queue.sort(key=lambda req: self._queue(req, now_s))
        self.book.retain({req.rid for req in queue})
        return None

    def _queue(self, req, now_s: float) -> int:
        """PASCAL's queue of a waiting request (0 high, 1 low), from :meth:`PhaseBook.rank`
        (demotion counts generated tokens: a long prompt is not demoted on arrival)."""
        key = self.book.rank(req.rid, now_s, len(req.origin_input_ids), 0, req.output_ids, False, now_s)
        return key[0]


def register(environ: Mapping[str, str] | None = None) -> bool:
    """The ``sglang.srt.plugins`` entry point. True when the hook was registered; never
    raises (a failure is one warning, and SGLang runs as without the plugin)."""
    raw = (os.environ if environ is None else environ).get(ENV_SETTINGS)
    if not raw:
        return False
    try:
        config = _settings(raw)
        reason = _unsupported()
        if reason is None:
            from sglang.srt.plugins.hook_registry import HookRegistry, HookType

            HookRegistry.register(TARGET, PhaseAwareHook(config), HookType.AFTER)
    except Exception as err:  # bad settings or a broken import: never stop SGLang
        reason = f"{type(err).__name__}: {err}"
    if reason is not None:
        _log.warning("reasonserve phase-aware admission is off: %s; SGLang runs without it", reason)
        return False
    _log.info("reasonserve phase-aware admission hooked on %s", TARGET)
    return True


def _settings(raw: str):
    from reasonserve.adapters.phase_book import PhaseAwareConfig
    from reasonserve.core.errors import InvalidArgumentError

    try:
        value = json.loads(raw)
    except ValueError as err:
        example = '{"think_end_token_id": 151668}'
        raise InvalidArgumentError(f"{ENV_SETTINGS} must be JSON like {example}: {err}") from None
    return PhaseAwareConfig.from_mapping(value, quantum=False)


def _unsupported() -> str | None:
    """Why this SGLang cannot take the hook, or None."""
    try:
        version = metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return "SGLang is not installed"
    numbers = tuple(int(n) for n in re.findall(r"\d+", version)[:3])
    if not MIN_VERSION <= numbers < MAX_VERSION:
        low, high = (".".join(map(str, v)) for v in (MIN_VERSION, MAX_VERSION))
        return f"SGLang {version} is outside the supported range [{low}, {high})"
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry  # noqa: F401
    except ImportError as err:
        return f"SGLang {version} has no plugin hook registry ({err})"
    # Located, not imported: SGLang imports its scheduler in the scheduler process; a
    # target that does not resolve there is logged by HookRegistry.apply_hooks.
    if importlib.util.find_spec(TARGET.rsplit(".", 2)[0]) is None:
        return f"SGLang {version} has no {TARGET.rsplit('.', 2)[0]}"
    return None
