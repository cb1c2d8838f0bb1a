"""Gateway responses in vLLM's shapes, with the reasoning apart from the answer.

Chat: ``message.reasoning`` and ``message.content`` (streamed: ``delta.reasoning``
pieces first, then ``delta.content``); completions: ``text`` is the answer and
``reasoning`` the thinking. ``usage`` adds, to OpenAI's counts and
``completion_tokens_details.reasoning_tokens``, what the program spent:
``program_tokens`` (every token decoded, probes and unchosen samples included),
``probe_tokens``, ``probe_prompt_tokens_computed`` (probe prompt tokens the upstream's
prefix cache did not hold; null where it does not say) and ``tokens_saved``. The
``reasonserve`` field says which program ran and how it ended (with the samples'
answers and certainty for self-consistency).
"""

from __future__ import annotations

from reasonserve.gateway.options import ProgramPlan
from reasonserve.gateway.program import Outcome

__all__ = ["ResponseShape", "program_info", "usage"]


def usage(o: Outcome) -> dict:
    completion = o.completion_tokens
    return {
        "prompt_tokens": o.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": o.prompt_tokens + completion,
        "completion_tokens_details": {"reasoning_tokens": o.reasoning_tokens},
        "program_tokens": o.program_tokens,
        "probe_tokens": o.probe_tokens,
        "probe_prompt_tokens_computed": o.probe_prompt_tokens_computed,
        "tokens_saved": o.tokens_saved,
    }


def program_info(plan: ProgramPlan, o: Outcome) -> dict:
    info: dict[str, object] = {
        "program": o.program,
        "early_exit": plan.early_exit,
        "exit": o.exit,
        "answer": o.answer,
        "certainty": o.certainty,
        "num_probes": o.num_probes,
        "thinking_token_budget": plan.thinking_budget,
    }
    if plan.kind == "sc":
        info["samples"] = o.samples
    return info


class ResponseShape:
    """Bodies and stream chunks of one response (chat or completion). ``show_reasoning``
    false (the chat field ``include_reasoning``): the reasoning is left out."""

    def __init__(
        self, *, chat: bool, response_id: str, model: str, created: int, show_reasoning: bool = True
    ) -> None:
        self.chat, self.id, self.model, self.created = chat, response_id, model, created
        self.show_reasoning = show_reasoning

    def _envelope(self, *, chunk: bool) -> dict:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def final(self, reasoning: str | None, content: str | None, plan: ProgramPlan, o: Outcome) -> dict:
        choice: dict = {"index": 0}
        reasoning = reasoning if self.show_reasoning else None
        if self.chat:
            choice["message"] = {
                "role": "assistant",
                "content": content,
                "reasoning": reasoning,
                "tool_calls": [],
            }
        else:
            choice.update(text=content or "", reasoning=reasoning)
        choice.update(logprobs=None, finish_reason=o.finish_reason, stop_reason=None)
        return {
            **self._envelope(chunk=False),
            "choices": [choice],
            "usage": usage(o),
            "reasonserve": program_info(plan, o),
        }

    def chunk(self, *, reasoning: str = "", content: str = "", first: bool = False) -> dict:
        """A piece of the output (``first``: the chat stream's opening chunk, with the role)."""
        choice: dict = {"index": 0}
        reasoning = reasoning if self.show_reasoning else ""
        if self.chat:
            delta: dict = {"role": "assistant", "content": ""} if first else {}
            if reasoning:
                delta["reasoning"] = reasoning
            if content:
                delta["content"] = content
            choice["delta"] = delta
        else:
            choice["text"] = content
            if reasoning:
                choice["reasoning"] = reasoning
        choice.update(logprobs=None, finish_reason=None)
        return {**self._envelope(chunk=True), "choices": [choice]}

    def last_chunk(self, plan: ProgramPlan, o: Outcome) -> dict:
        """The closing chunk: the finish reason and the ``reasonserve`` field."""
        body = self.chunk()
        body["choices"][0].update(finish_reason=o.finish_reason, stop_reason=None)
        body["reasonserve"] = program_info(plan, o)
        return body

    def usage_chunk(self, o: Outcome) -> dict:
        return {**self._envelope(chunk=True), "choices": [], "usage": usage(o)}
