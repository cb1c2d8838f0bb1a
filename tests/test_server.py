"""The OpenAI-compatible server on a loopback port, driven by the openai client."""

import socket
import threading
import time

import pytest

openai = pytest.importorskip("openai", reason="server tests need the openai client (dev extra)")
uvicorn = pytest.importorskip("uvicorn", reason="server tests need uvicorn (serve extra)")

from reasonserve.engine import Engine, EngineConfig, make_tiny_checkpoint  # noqa: E402
from reasonserve.serve.app import create_app  # noqa: E402
from reasonserve.serve.runner import EngineRunner  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = make_tiny_checkpoint(tmp_path_factory.mktemp("srv"))
    runner = EngineRunner(Engine.from_pretrained(path, EngineConfig(block_size=4, num_blocks=256)))
    app = create_app(runner, model_name="tiny", max_tokens_limit=64, max_request_bytes=20_000)
    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.started
    client = openai.OpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=60
    )
    yield client, runner, port
    srv.should_exit = True
    thread.join(timeout=10)
    runner.close()


def test_models_health_and_metrics(server):
    client, _, port = server
    assert [m.id for m in client.models.list().data] == ["tiny"]
    import httpx

    assert httpx.get(f"http://127.0.0.1:{port}/health").json() == {"status": "ok"}
    text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    assert "reasonserve_running" in text and "reasonserve_verify_passes" in text


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

    r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": [1] * 10_000, "max_tokens": 1})
    assert r.status_code == 413


def test_client_disconnect_aborts_the_request(server):
    _, runner, port = server
    import httpx

    with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/completions",
                      json={"prompt": [5, 6], "max_tokens": 64, "stream": True}) as r:  # fmt: skip
        for line in r.iter_lines():
            if line.startswith("data:"):
                break  # leave after the first chunk
    deadline = time.monotonic() + 30
    while runner.stats()["running"] + runner.stats()["waiting"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert runner.stats()["running"] == 0 and runner.stats()["waiting"] == 0
    runner.engine.check_blocks()
