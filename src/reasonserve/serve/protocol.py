"""Request bodies of ``/v1/completions`` and ``/v1/chat/completions`` (pydantic, strict).

Strict types: no coercion (``"stream": "yes"``, ``seed: 531.0`` and ``prompt: [true]``
are 400s), unknown fields are 400s naming the field, numbers carry explicit ranges so
nothing out of range reaches the engine. The field set follows OpenAI plus the vLLM
extensions the reasoning programs use; :mod:`reasonserve.serve.sampling` turns a body
into engine requests and rejects the parameters we accept in the schema but do not
implement with a 400 that names them (see ``docs/serve.md``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "ChatCompletionRequest",
    "ChatMessage",
    "CompletionRequest",
    "DetokenizeRequest",
    "StreamOptions",
    "StrictModel",
    "TextPart",
    "TokenizeRequest",
    "ToolCall",
]

MAX_INT32 = 2**31 - 1
MAX_SEED = 2**63 - 1
MAX_STOP_STRINGS = 16
MAX_TEMPLATE_CHARS = 200_000

_Id = Annotated[int, Field(ge=0, le=MAX_INT32)]
_Stop = Annotated[str, Field(min_length=1, max_length=256)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


StrictModel = _Strict  # the base of every body here: other hosts' schemas (the gateway) extend it


class StreamOptions(_Strict):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class _Sampling(_Strict):
    """Fields common to both endpoints."""

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1, le=MAX_INT32)
    temperature: float | None = Field(None, ge=0, le=100)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=-1, le=MAX_INT32, description="-1 or 0 disables")
    min_p: float | None = Field(None, ge=0, le=1)
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    n: int = Field(1, ge=1, le=128)
    best_of: int | None = Field(None, ge=1, le=128)
    stop: _Stop | list[_Stop] | None = Field(None, max_length=MAX_STOP_STRINGS)
    stop_token_ids: list[_Id] | None = Field(None, max_length=64)
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = Field(0, ge=0, le=MAX_INT32)
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float = Field(0.0, ge=-2, le=2)
    frequency_penalty: float = Field(0.0, ge=-2, le=2)
    repetition_penalty: float | None = Field(None, gt=0, le=100)
    logit_bias: dict[str, float] | None = None
    use_beam_search: bool = False
    prompt_logprobs: int | None = Field(None, ge=0, le=20)
    skip_special_tokens: bool = True
    response_format: dict[str, str] | None = None
    user: str | None = Field(None, max_length=256, description="accepted and ignored, as in vLLM")
    # vLLM / reasonserve extensions
    priority: int = Field(0, ge=-MAX_INT32, le=MAX_INT32)
    request_id: str | None = Field(None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")
    return_token_ids: bool = False
    deterministic: bool = False
    is_deterministic: bool | None = Field(None, description="LLM-42's name for `deterministic`")
    vllm_xargs: dict[str, str | int | float] | None = None
    thinking_token_budget: int | None = Field(
        None, ge=0, le=MAX_INT32, description="reasoning tokens before the end of thinking is forced"
    )

    @model_validator(mode="after")
    def _fold_is_deterministic(self):
        """``is_deterministic`` (LLM-42's spelling) sets ``deterministic``; a conflict is a 400."""
        if self.is_deterministic is not None:
            if self.deterministic and not self.is_deterministic:
                raise ValueError("deterministic=true and is_deterministic=false disagree; send one of them")
            self.deterministic = self.is_deterministic
        return self


class CompletionRequest(_Sampling):
    prompt: (
        Annotated[str, Field(min_length=1)]
        | Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
        | Annotated[list[_Id], Field(min_length=1)]
        | Annotated[list[Annotated[list[_Id], Field(min_length=1)]], Field(min_length=1)]
    )
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=20)
    suffix: str | None = None
    add_special_tokens: bool = True


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class FunctionCall(_Strict):
    name: str
    arguments: str = Field(description="JSON text; templates receive it parsed")


class ToolCall(_Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Strict):
    """A message as the chat template sees it (``tool_calls`` only on assistant
    messages, ``tool_call_id`` only on tool messages)."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = Field(None, max_length=256)
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = Field(None, max_length=256)
    reasoning: str | None = None
    reasoning_content: str | None = None


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_INT32)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    chat_template: str | None = Field(None, max_length=MAX_TEMPLATE_CHARS)
    chat_template_kwargs: dict[str, Any] | None = None
    include_reasoning: bool = True
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool | None = Field(None, description="accepted and ignored (no tool calling)")
    store: bool | None = Field(None, description="accepted and ignored: nothing is stored")
    metadata: dict[str, str] | None = Field(None, description="accepted and ignored")
    service_tier: str | None = Field(None, max_length=64, description="accepted and ignored")


class TokenizeRequest(_Strict):
    """``POST /tokenize`` (vLLM's shape): the token ids of a text, or of chat messages
    after the chat template."""

    model: str | None = None
    prompt: Annotated[str, Field(min_length=1)] | None = None
    messages: list[ChatMessage] | None = Field(None, min_length=1)
    add_special_tokens: bool | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template: str | None = Field(None, max_length=MAX_TEMPLATE_CHARS)
    chat_template_kwargs: dict[str, Any] | None = None
    return_token_strs: bool = False


class DetokenizeRequest(_Strict):
    """``POST /detokenize`` (vLLM's shape): the text of token ids."""

    model: str | None = None
    tokens: list[_Id] = Field(max_length=1_000_000)
