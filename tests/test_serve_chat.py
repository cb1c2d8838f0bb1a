"""Chat through a real HF tokenizer's template, /tokenize, /detokenize, EOS, priority."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
transformers = pytest.importorskip("transformers", reason="HF tokenizers need transformers (dev extra)")
from fastapi.testclient import TestClient  # noqa: E402

from _hf_tokenizer import ADDED, VOCAB_SIZE, tiny_hf_checkpoint, write_tiny_hf_tokenizer  # noqa: E402
from reasonserve.engine import Engine, EngineConfig, make_tiny_checkpoint  # noqa: E402
from reasonserve.serve import launch  # noqa: E402
from reasonserve.serve.app import capacity_of, create_app  # noqa: E402
from reasonserve.serve.config import ServeConfig  # noqa: E402
from reasonserve.serve.protocol import CompletionRequest  # noqa: E402
from reasonserve.serve.runner import EngineRunner  # noqa: E402
from reasonserve.serve.sampling import plan_completion  # noqa: E402

USER = [{"role": "user", "content": "What is 2+2?"}]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny_hf_checkpoint(tmp_path_factory.mktemp("hfchat"))


@pytest.fixture(scope="module")
def hf_tok(folder):
    return transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)


def _client(folder, cfg: ServeConfig | None = None, engine_cfg: EngineConfig | None = None, **engine_kwargs):
    engine = Engine.from_pretrained(
        folder, engine_cfg or EngineConfig(block_size=4, num_blocks=256), **engine_kwargs
    )
    runner = EngineRunner(engine)
    return runner, TestClient(create_app(runner, cfg or ServeConfig(model_name="m")))


@pytest.fixture(scope="module")
def client(folder):
    runner, client = _client(folder)
    yield client
    runner.close()


def _chat(client, **body):
    body.setdefault("messages", USER)
    body.setdefault("max_tokens", 2)
    return client.post("/v1/chat/completions", json={"return_token_ids": True, **body})


def test_the_prompt_is_the_tokenizers_chat_template(client, hf_tok):
    reply = _chat(client).json()
    expected = hf_tok.apply_chat_template(USER, tokenize=False, add_generation_prompt=True)
    assert expected.endswith("<|im_start|>assistant\n")
    assert reply["choices"][0]["prompt_token_ids"] == hf_tok.encode(expected, add_special_tokens=False)


def test_chat_template_kwargs_reach_the_template(client, hf_tok):
    ids = _chat(client, chat_template_kwargs={"enable_thinking": False}).json()["choices"][0][
        "prompt_token_ids"
    ]
    assert hf_tok.decode(ids).endswith("assistant\n<think>\n\n</think>\n\n")
    assert ids[-3] == ADDED["</think>"]  # one token, as in Qwen3's vocabulary
    bad = _chat(client, chat_template_kwargs={"messages": []}).json()["error"]
    assert bad["param"] == "chat_template_kwargs"


def test_request_templates_need_the_servers_trust(folder, client, hf_tok):
    template = "{% for m in messages %}[{{ m.role }}|{{ m.name }}]{{ m.content }}{% endfor %}"
    refused = _chat(client, chat_template=template).json()["error"]
    assert refused["param"] == "chat_template" and "--trust-request-chat-template" in refused["message"]
    runner, trusting = _client(folder, ServeConfig(model_name="m", trust_request_chat_template=True))
    try:
        messages = [{"role": "user", "content": "hi", "name": "ann"}]
        ids = _chat(trusting, chat_template=template, messages=messages).json()["choices"][0][
            "prompt_token_ids"
        ]
        assert hf_tok.decode(ids) == "[user|ann]hi"
        broken = _chat(trusting, chat_template="{% for %}").json()["error"]
        assert broken["param"] == "chat_template" and "TemplateSyntaxError" in broken["message"]
    finally:
        runner.close()


def test_a_template_that_renders_nothing_is_a_400_naming_it(folder):
    """An empty rendering (here the sandbox's empty string for ``__class__``) would reach
    the engine as an empty prompt: the 400 names the template, before any engine work."""
    runner, trusting = _client(folder, ServeConfig(model_name="m", trust_request_chat_template=True))
    try:
        for template in ("{{ messages.__class__ }}", "{% if false %}x{% endif %}"):
            reply = _chat(trusting, chat_template=template)
            error = reply.json()["error"]
            assert reply.status_code == 400 and error["param"] == "chat_template", error
            assert "no tokens" in error["message"], error["message"]
        assert _chat(trusting, chat_template="{{ messages[0].content }}").status_code == 200
    finally:
        runner.close()


def test_a_request_template_cannot_hold_the_planning_thread(folder):
    """Nested loops (10^10 iterations) are cut off by the step budget with a 400, and the
    server goes on serving; a long conversation through a legitimate template is not."""
    runner, trusting = _client(folder, ServeConfig(model_name="m", trust_request_chat_template=True))
    try:
        loops = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
        error = _chat(trusting, chat_template=loops).json()["error"]
        assert error["param"] == "chat_template" and "steps of work" in error["message"]
        template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
        messages = [{"role": "user", "content": "x"}] * 3000
        tokens = trusting.post("/tokenize", json={"messages": messages, "chat_template": template}).json()
        assert tokens["count"] == 3000 * len("<user>x")
    finally:
        runner.close()


def test_server_template_replaces_the_tokenizers(folder, hf_tok, tmp_path):
    file = tmp_path / "t.jinja"
    file.write_text("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}")
    runner, client = _client(
        folder, ServeConfig(model_name="m", chat_template=launch.read_chat_template(str(file)))
    )
    try:
        ids = _chat(client).json()["choices"][0]["prompt_token_ids"]
        assert hf_tok.decode(ids) == "<user>What is 2+2?"
    finally:
        runner.close()


def test_a_tokenizer_without_a_template_needs_one_from_the_server(tmp_path):
    path = make_tiny_checkpoint(tmp_path / "m", vocab_size=VOCAB_SIZE)
    write_tiny_hf_tokenizer(path, chat_template=None)
    runner, client = _client(path)
    try:
        error = _chat(client).json()["error"]
        assert error["param"] == "messages" and "--chat-template" in error["message"]
    finally:
        runner.close()


def test_standard_openai_chat_fields_are_accepted(client, hf_tok):
    """Defect 9: message name, the tool role, assistant tool_calls, store, metadata,
    service_tier and parallel_tool_calls were 400s."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "add", "arguments": json.dumps({"a": 2})},
    }
    messages = [
        {"role": "system", "content": "be brief", "name": "sys"},
        {"role": "user", "content": "add", "name": "ann"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "4", "tool_call_id": "call_1"},
    ]
    reply = _chat(client, messages=messages, store=False, metadata={"k": "v"}, service_tier="auto",
                  parallel_tool_calls=False)  # fmt: skip
    assert reply.status_code == 200, reply.text
    expected = hf_tok.apply_chat_template(
        [{**m, "content": m["content"] or ""} for m in messages], tokenize=False, add_generation_prompt=True
    )
    assert hf_tok.decode(reply.json()["choices"][0]["prompt_token_ids"]) == expected
    bad = _chat(client, messages=[{"role": "user", "content": "x", "tool_calls": [call]}]).json()["error"]
    assert bad["param"] == "messages[0].tool_calls"
    call["function"]["arguments"] = "{not json"
    bad = _chat(client, messages=[{"role": "assistant", "content": "x", "tool_calls": [call]}]).json()[
        "error"
    ]
    assert bad["param"] == "messages[0].tool_calls[0].function.arguments"


def test_tokenize_messages_and_detokenize(client, hf_tok):
    chat = _chat(client).json()["choices"][0]["prompt_token_ids"]
    out = client.post("/tokenize", json={"messages": USER}).json()
    assert out["tokens"] == chat and out["count"] == len(chat)
    text = client.post("/tokenize", json={"prompt": "hé <think>", "return_token_strs": True}).json()
    assert text["tokens"] == hf_tok.encode("hé <think>") and text["token_strs"][-1] == "<think>"
    back = client.post("/detokenize", json={"tokens": text["tokens"]}).json()
    assert back == {"prompt": "hé <think>"}
    assert client.post("/detokenize", json={"tokens": [VOCAB_SIZE]}).json()["error"]["param"] == "tokens"
    both = client.post("/tokenize", json={"prompt": "a", "messages": USER}).json()["error"]
    assert both["param"] == "prompt"


def test_serve_honours_every_eos_id_of_the_checkpoint(folder):
    tok = launch.load_serving_tokenizer(folder)
    assert launch.serving_eos_ids(folder, tok) == (ADDED["<|im_end|>"], ADDED["<|endoftext|>"])
    assert launch.end_of_thinking_id("qwen3", tok) == ADDED["</think>"]
    assert launch.end_of_thinking_id(None, tok) is None


def test_priority_is_lower_first_as_in_vllm(tmp_path):
    """One seat: a blocker runs; four requests at priority 0, then one at -100 queue up
    (HTTP bodies planned by the server). Under --policy priority the -100 one runs right
    after the blocker; under fcfs it runs last."""
    path = make_tiny_checkpoint(tmp_path / "m")
    orders = {}
    for name in ("priority", "fcfs"):
        engine = Engine.from_pretrained(path, EngineConfig(block_size=4, num_blocks=256, max_num_seqs=1),
                                        policy=launch.make_policy(name, None))  # fmt: skip
        cap = capacity_of(engine)
        for rid, priority, n in [("blocker", 0, 20), ("a", 0, 3), ("b", 0, 3), ("c", 0, 3), ("d", 0, 3),
                                 ("urgent", -100, 3)]:  # fmt: skip
            body = CompletionRequest(prompt=[1, 2], max_tokens=n, priority=priority, request_id=rid)
            job = plan_completion(body, cap, ServeConfig()).jobs[0]
            engine.add_request(job.prompt_ids, job.params, rid)
            if rid == "blocker":
                engine.step()  # admitted before the others arrive
        finished = []
        while engine.has_unfinished():
            finished += [o.request_id for o in engine.step()]
        orders[name] = finished
    assert orders["priority"] == ["blocker", "urgent", "a", "b", "c", "d"]
    assert orders["fcfs"] == ["blocker", "a", "b", "c", "d", "urgent"]


def test_policy_flags_build_the_policy_or_name_the_problem():
    from reasonserve.core.errors import InvalidArgumentError
    from reasonserve.policies import PascalPolicy

    assert launch.make_policy("pascal", '{"quantum": 64}') == PascalPolicy(quantum=64)
    for name, args, match in [("nope", None, "--policy must be one of"), ("pascal", '{"quantom": 1}', "quantom"),
                              ("pascal", "[1]", "JSON object"), ("pascal", '{"quantum": -1}', "quantum"),
                              ("fcfs", '{"name": "x"}', "name")]:  # fmt: skip
        with pytest.raises(InvalidArgumentError, match=match):
            launch.make_policy(name, args)
    with pytest.raises(InvalidArgumentError, match="no file"):
        launch.read_chat_template("missing.jinja")
    assert launch.read_chat_template("{{ messages }}") == "{{ messages }}"
