"""Per-host request shims (pure: request in, ``(path, body)`` out; replies back in).

Import them from here: :class:`OpenAIShim` (any OpenAI-compatible server, and
``reasonserve serve``), :class:`VLLMShim`, :class:`SGLangShim`. Every shim has
``payload(req, *, stream) -> (path, body)``, ``parse_result(body, request_id)``,
``new_stream_state()`` + ``parse_event(data, request_id, state)``,
``abort_payload(request_id)``, ``tokenize_payload(text)`` + ``parse_tokens(body)``,
``priority_value(priority)`` and ``capabilities``.
"""

from __future__ import annotations

from reasonserve.clients._openai_shim import OpenAIShim, VLLMShim
from reasonserve.clients._sglang_shim import SGLangShim

__all__ = ["OpenAIShim", "SGLangShim", "Shim", "VLLMShim"]

Shim = OpenAIShim | SGLangShim
