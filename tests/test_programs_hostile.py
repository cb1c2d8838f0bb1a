"""Programs against a host that misbehaves: a run must end with a typed error, never loop."""

from __future__ import annotations

import asyncio

import pytest

from reasonserve.clients.errors import MalformedResponseError
from reasonserve.clients.protocol import Capabilities, GenerateResult, ProbeResult
from reasonserve.programs import CoTWithProbe
from reasonserve.programs.trace import ProgramError


class EmptyLengthHost:
    """Every chunk 'hits its length limit' without producing a token."""

    def __init__(self, token_ids: bool) -> None:
        self.capabilities = Capabilities(token_ids=token_ids)
        self.token_ids = token_ids
        self.generated = 0

    async def generate(self, req):
        self.generated += 1
        await asyncio.sleep(0)
        ids = () if self.token_ids else None
        return GenerateResult(req.request_id, "", ids, "length", prompt_token_ids=(1, 2))

    async def probe(self, prefix, suffix, max_tokens, *, request_id=None):
        await asyncio.sleep(0)
        return ProbeResult("", (), "length")

    async def abort(self, request_id):
        return None


@pytest.mark.parametrize("token_ids", [True, False])
def test_cot_stops_on_a_host_that_returns_length_without_tokens(token_ids):
    host = EmptyLengthHost(token_ids)
    program = CoTWithProbe(max_tokens=10_000, chunk_tokens=16)
    with pytest.raises(ProgramError) as err:
        asyncio.run(asyncio.wait_for(program.run(host, "hi"), 5.0))
    assert isinstance(err.value.__cause__, MalformedResponseError)
    assert host.generated <= 2  # the first empty chunk is the last one asked for (the next may be started)
