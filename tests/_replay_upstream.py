"""An OpenAI-compatible upstream that replays recorded reasoning (probe recordings).

It speaks vLLM's dialect over HTTP (``/tokenize``; ``/v1/completions`` with token-id
prompts, ``return_token_ids``, SSE streams), with a character tokenizer: each character
is its code point, the end-of-thinking tag ``</think>`` is the one id :data:`TAG`, and
a reasoning token is the id :data:`REASONING_ID`. A prompt ``replay <key>`` selects a
recorded trajectory; what follows it in a request's prompt says what is asked:

* ``n`` reasoning ids: continue the reasoning from token ``n``: up to ``max_tokens``
  more, ending where the recording ended (``stop``, the tag's id added, when it ended on
  its own; ``length`` when it hit its budget);
* ``n`` reasoning ids + the probe suffix: the probe recorded at token ``n`` (its raw
  text; a probe whose text was not recorded answers its recorded answer and ``}``);
* ... + the tag: the answer, ``\\boxed{final answer}``.

Every request's ``priority`` and kind are kept in :attr:`ReplayUpstream.seen`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

TAG = 1_000_000
REASONING_ID = 7
PREFIX = "replay "


def encode(text: str) -> list[int]:
    out: list[int] = []
    for i, part in enumerate(text.split("</think>")):
        out += ([TAG] if i else []) + [ord(c) for c in part]
    return out


@dataclass
class ReplayUpstream:
    trajectories: dict  # "dataset/problem/rollout" -> Trajectory
    finals: dict  # "dataset/problem/rollout" -> the recorded final answer (None: none)
    suffix_ids: tuple[int, ...]
    seen: list[tuple[str, str, int, int]] = field(default_factory=list)  # (key, kind, position, priority)

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/tokenize")
        async def tokenize(request: Request):
            body = await request.json()
            return {"tokens": encode(body["prompt"]), "count": len(body["prompt"])}

        @app.post("/v1/completions")
        async def completions(request: Request):
            body = await request.json()
            key, kind, position, text, ids, finish = self._reply(body["prompt"], body["max_tokens"])
            self.seen.append((key, kind, position, body.get("priority", 0)))
            choice = {"index": 0, "text": text, "token_ids": ids, "finish_reason": finish}
            usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(ids)}
            if not body.get("stream"):
                return JSONResponse({"choices": [choice], "usage": usage})
            return StreamingResponse(_sse(choice), media_type="text/event-stream")

        return app

    def _reply(self, prompt: list[int], max_tokens: int):
        head = prompt.index(REASONING_ID) if REASONING_ID in prompt else len(prompt)
        if prompt[head - 1] == TAG:  # answering right after the prompt: no reasoning at all
            head -= 1
        key = "".join(map(chr, prompt[:head]))[len(PREFIX) :]
        tr = self.trajectories[key]
        rest = prompt[head:]
        position = rest.count(REASONING_ID)
        if rest and rest[-1] == TAG:
            final = self.finals[key]
            return (
                key,
                "answer",
                position,
                f"\n\n\\boxed{{{final}}}" if final else "\n\nno answer",
                [ord("x")],
                "stop",
            )
        if tuple(rest[position:]) == self.suffix_ids:
            i = tr.positions.index(position)
            text = (
                tr.texts[i] if tr.texts and tr.texts[i] else (f"{tr.answers[i]}}}" if tr.answers[i] else "")
            )
            return key, "probe", position, text, [ord(c) for c in text][:20], "length"
        n = min(max_tokens, tr.tokens_used - position)
        ends = position + n == tr.tokens_used
        if ends and tr.finished is not False:
            return key, "chunk", position, "", [REASONING_ID] * n + [TAG], "stop"
        return key, "chunk", position, "", [REASONING_ID] * n, "length"


async def _sse(choice: dict):
    yield f"data: {json.dumps({'choices': [choice]})}\n\n"
    yield "data: [DONE]\n\n"
