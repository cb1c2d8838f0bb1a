"""Client side of SGLang seeded sampling: a shim that names the processor per request.

SGLang runs a custom logit processor only for requests whose body names it
(``custom_logit_processor``: the string ``SeededSamplingProcessor.to_str()``).
:class:`SeededSGLangShim` is :class:`reasonserve.clients.SGLangShim` plus that field on
every request whose ``extra`` carries ``reasonserve_seed`` (which ``SGLangShim``
already sends in ``custom_params``). The string is made where SGLang is installed
(``processor=SeededSamplingProcessor.to_str()``) and passed in, so the client itself
needs neither SGLang nor dill. The server needs ``--enable-custom-logit-processor``
(read the security note in ``docs/use_sglang.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

from reasonserve.adapters.seeded import SEED_KEY
from reasonserve.clients import GenerateRequest, SGLangShim
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["SeededSGLangShim"]


@dataclass(frozen=True)
class SeededSGLangShim(SGLangShim):
    """See the module docstring. ``processor``: ``SeededSamplingProcessor.to_str()``."""

    processor: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.processor, str) or '"callable"' not in self.processor:
            raise InvalidArgumentError(
                "processor must be the string SeededSamplingProcessor.to_str() returns "
                "(from reasonserve.adapters.sglang, where SGLang is installed)"
            )

    def payload(self, req: GenerateRequest, *, stream: bool) -> tuple[str, dict]:
        path, body = super().payload(req, stream=stream)
        if SEED_KEY in req.extra:
            body["custom_logit_processor"] = self.processor
        return path, body
