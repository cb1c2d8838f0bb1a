"""Request bodies of the gateway: ``reasonserve serve``'s strict OpenAI schemas plus the
reasoning controls, sent as OpenAI extra-body fields (``extra_body=`` in the openai client).

* ``early_exit``: ``"off"``; ``"certified"`` (the shipped rule,
  :func:`~reasonserve.programs.cot.host_default_rule`); a Dynasor preset name
  (``"mild"``, ``"low"``, ``"mid"``, ``"high"``, ``"crazy"``: that many agreeing probes
  at that probe interval); or an object :class:`EarlyExitSpec`.
* ``thinking_token_budget`` (``reasonserve serve``'s field, vLLM's name): the most
  reasoning tokens; at the cap the thinking block is closed and the model answers (0:
  it answers at once).
* ``self_consistency``: :class:`SelfConsistencySpec`.

Unknown fields, wrong types and out-of-range values are 400s naming the field.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, TypeAdapter

from reasonserve.serve.protocol import MAX_INT32, ChatCompletionRequest, CompletionRequest, StrictModel

__all__ = [
    "EARLY_EXIT_ADAPTER",
    "PRESET_NAMES",
    "EarlyExit",
    "EarlyExitSpec",
    "GatewayChatRequest",
    "GatewayCompletionRequest",
    "SelfConsistencySpec",
]

PRESET_NAMES = ("mild", "low", "mid", "high", "crazy")


class EarlyExitSpec(StrictModel):
    """Probe every ``probe_interval_tokens`` reasoning tokens; ``rule``:

    * ``"agreement"`` (Dynasor): exit once the last ``agreement`` counted probes give the
      same answer, all but at most ``tolerance`` of them (a probe whose text hesitates --
      "wait", "hmm", ... -- is not counted unless ``hesitation`` is false), never before
      ``min_tokens``;
    * ``"certified"``: the shipped rule at this probe interval (the other fields are
      not its parameters: setting them is an error)."""

    rule: Literal["agreement", "certified"] = "agreement"
    probe_interval_tokens: int = Field(64, ge=1, le=8192)
    agreement: int = Field(3, ge=1, le=1024)
    tolerance: int = Field(0, ge=0, le=1023)
    min_tokens: int = Field(0, ge=0, le=MAX_INT32)
    hesitation: bool = True


EarlyExit = Literal["off", "certified", "mild", "low", "mid", "high", "crazy"] | EarlyExitSpec
EARLY_EXIT_ADAPTER: TypeAdapter = TypeAdapter(EarlyExit)


class SelfConsistencySpec(StrictModel):
    """Up to ``n`` independent samples, ``samples_per_step`` at a time; after each step the
    answers' semantic-entropy certainty is read and sampling stops (``stop``) when it
    reaches ``threshold`` (``"entropy"``), when every answer so far agrees
    (``"agreement"``), or never (``"none"``: all ``n``), not before ``min_samples``.
    ``answer``: the majority answer (ties: the answer seen first)."""

    n: int = Field(8, ge=1, le=64)
    stop: Literal["entropy", "agreement", "none"] = "entropy"
    threshold: float = Field(0.9, ge=0, le=1)
    min_samples: int = Field(2, ge=1, le=64)
    samples_per_step: int = Field(2, ge=1, le=64)
    answer: Literal["majority"] = "majority"


class _Controls(StrictModel):
    early_exit: EarlyExit | None = None
    self_consistency: SelfConsistencySpec | None = None
    chat_template_kwargs: dict[str, str | int | float | bool] | None = None


class GatewayCompletionRequest(CompletionRequest, _Controls):
    """``/v1/completions``: one prompt (text or token ids)."""


class GatewayChatRequest(ChatCompletionRequest, _Controls):
    """``/v1/chat/completions``."""
