"""The OpenAI-compatible server on a loopback port, driven by the openai client."""

import pytest

openai = pytest.importorskip("openai", reason="server tests need the openai client (dev extra)")
uvicorn = pytest.importorskip("uvicorn", reason="server tests need uvicorn (serve extra)")

from _live_server import TIMEOUT_S, live_server, tiny_engine, wait_until  # noqa: E402
from reasonserve.engine import EngineConfig  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    engine = tiny_engine(tmp_path_factory.mktemp("srv"), EngineConfig(block_size=4, num_blocks=256))
    with live_server(engine) as live:
        client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S)
        yield client, live.runner, live.port


def test_models_health_and_metrics(server):
    client, _, port = server
    assert [m.id for m in client.models.list().data] == ["tiny"]
    import httpx

    assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=TIMEOUT_S).json() == {"status": "ok"}
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=TIMEOUT_S).text
    assert "reasonserve:num_requests_running" in text and "reasonserve:dvr_verify_passes_total" in text


def test_completions_with_token_ids_and_text(server):
    client, _, _ = server
    out = client.completions.create(model="tiny", prompt=[1, 2, 3], max_tokens=5, temperature=0)
    assert out.choices[0].finish_reason == "length" and out.usage.completion_tokens == 5
    text = client.completions.create(model="tiny", prompt="hello", max_tokens=4, temperature=0)
    assert text.usage.prompt_tokens == 5  # byte tokenizer: one token per byte


def test_seeded_deterministic_requests_repeat_exactly(server):
    client, _, _ = server
    kwargs = dict(model="tiny", prompt=[9, 8, 7], max_tokens=12, temperature=1.0,
                  extra_body={"seed": 1234, "deterministic": True})  # fmt: skip
    a = client.completions.create(**kwargs)
    b = client.completions.create(**kwargs)
    assert a.choices[0].text == b.choices[0].text  # the seed/deterministic extensions are honoured


def test_streaming_chat(server):
    client, _, _ = server
    stream = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                            max_tokens=6, temperature=0, stream=True)  # fmt: skip
    chunks = list(stream)
    assert chunks and chunks[-1].choices[0].finish_reason == "length"
    full = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                          max_tokens=6, temperature=0)  # fmt: skip
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == full.choices[0].message.content


@pytest.mark.parametrize(
    "kwargs",
    [dict(prompt=[], max_tokens=4), dict(prompt=[1, 999], max_tokens=4), dict(prompt=[1], max_tokens=0),
     dict(prompt=[1], max_tokens=65), dict(prompt=[1], max_tokens=4, temperature=-1),
     dict(prompt=[1], max_tokens=4, top_p=2.0)],
)  # fmt: skip
def test_bad_requests_get_400_and_the_server_keeps_serving(server, kwargs):
    client, _, _ = server
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", **kwargs)
    assert client.completions.create(model="tiny", prompt=[1], max_tokens=1).choices


def test_oversized_request_gets_413(server):
    _, _, port = server
    import httpx

    r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": [1] * 10_000, "max_tokens": 1}, timeout=TIMEOUT_S)
    assert r.status_code == 413


def test_client_disconnect_aborts_the_request(server):
    _, runner, port = server
    import httpx

    with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/completions",
                      json={"prompt": [5, 6], "max_tokens": 64, "stream": True}, timeout=TIMEOUT_S) as r:  # fmt: skip
        for line in r.iter_lines():
            if line.startswith("data:"):
                break  # leave after the first chunk
    assert wait_until(lambda: runner.num_live == 0)
    assert runner.snapshot.kv_blocks_used == 0
    runner.engine.check_blocks()
