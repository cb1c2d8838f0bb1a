"""Model families from HF folders written by transformers itself, against transformers.

Each tiny checkpoint keeps the architecture fields of a real reasoning model (RoPE type
and base, norms, biases, tied embeddings, head dims) and is written by transformers'
own classes (``save_pretrained``: transformers 5's ``rope_parameters`` layout; one test
rewrites it to the transformers 4 layout). Logits come from the engine's paged path:
chunked prefill of two packed sequences, then decode steps, on both kernel sets.

Tolerance: float32, 2 layers: |ours - transformers| <= 1e-4 + 1e-4 |transformers|
(the ops' own tolerance is 1e-5; the model adds a few products and a softmax). Every
case also checks that the feature it names matters: without it, logits differ from
transformers by far more than the tolerance.
"""

import json

import pytest
import torch

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.engine import DecoderModel, Engine, EngineConfig, ModelConfig, SamplingParams
from reasonserve.engine.checkpoint import _param_shapes, checkpoint_eos_ids
from reasonserve.engine.kernels import INVARIANT, STOCK
from reasonserve.engine.model_runner import Chunk, ModelRunner
from reasonserve.engine.rope import _attention_factor, _inv_freq, parse_rope
from reasonserve.engine.safetensors_io import load_safetensors

transformers = pytest.importorskip("transformers", reason="the cross-check needs transformers (dev extra)")

ATOL = RTOL = 1e-4
_TINY = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
# architecture fields of the real models (shapes shrunk)
FAMILIES = {
    # DeepSeek-R1-Distill-Llama-8B / Llama-3.1: llama3 RoPE, theta 5e5, eps 1e-5
    "llama3": ("LlamaConfig", dict(rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
               "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
               max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False)),
    "llama_linear": ("LlamaConfig", dict(rope_parameters={"rope_type": "linear", "rope_theta": 10000.0,
                     "factor": 4.0}, max_position_embeddings=4096, attention_bias=True, mlp_bias=True)),
    "llama_dynamic": ("LlamaConfig", dict(rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0,
                      "factor": 2.0}, max_position_embeddings=4096, tie_word_embeddings=True)),
    # DeepSeek-R1-Distill-Qwen-1.5B: q/k/v biases, window configured but off
    "qwen2": ("Qwen2Config", dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
              max_position_embeddings=131072, use_sliding_window=False, sliding_window=4096,
              max_window_layers=21, tie_word_embeddings=False)),
    # Qwen2.5-0.5B-style: tied embeddings, theta 1e6
    "qwen2_tied": ("Qwen2Config", dict(rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                   max_position_embeddings=32768, tie_word_embeddings=True)),
    # Qwen3-8B / DeepSeek-R1-0528-Qwen3-8B: q/k norm, head_dim 32 != 64 / 4, theta 1e6
    "qwen3": ("Qwen3Config", dict(rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
              head_dim=32, max_position_embeddings=40960, tie_word_embeddings=False)),
    # Qwen3 with the YaRN settings its model card gives for 131k context
    "qwen3_yarn": ("Qwen3Config", dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0,
                   "factor": 4.0, "original_max_position_embeddings": 32768}, head_dim=32,
                   max_position_embeddings=40960, tie_word_embeddings=True)),
}  # fmt: skip


def _hf_model(name: str):
    cls_name, fields = FAMILIES[name]
    cfg = getattr(transformers, cls_name)(**_TINY, **json.loads(json.dumps(fields)))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # weights large enough that every feature moves the logits
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif pname.endswith("bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * p.shape[-1] ** -0.5)
    return model


_CACHE: dict = {}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    def get(name: str):
        if name not in _CACHE:
            path = tmp_path_factory.mktemp(name)
            model = _hf_model(name)
            model.save_pretrained(path)
            _CACHE[name] = (path, model)
        return _CACHE[name]

    return get


_OURS: dict = {}


def _ours(path) -> DecoderModel:
    """The engine's model of a folder, loaded once (runners bring their own KV cache)."""
    if path not in _OURS:
        _OURS[path] = DecoderModel.from_pretrained(path)
    return _OURS[path]


def _hf_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0]


def _paged_logits(model: DecoderModel, prompts: list[list[int]], decode: list[list[int]], kernels, chunk=8):
    """Chunked prefill of all prompts packed together, then one decode step at a time."""
    runner = ModelRunner(model, num_blocks=64, block_size=4)
    tables = [list(range(i * 16, (i + 1) * 16)) for i in range(len(prompts))]
    rows: list[list[torch.Tensor]] = [[] for _ in prompts]
    for start in range(0, max(map(len, prompts)), chunk):
        live = [i for i, p in enumerate(prompts) if start < len(p)]
        parts = [prompts[i][start : start + chunk] for i in live]
        logits = runner.run(
            [Chunk(t, start, tables[i], len(t)) for i, t in zip(live, parts, strict=True)], kernels
        )
        for i, block in zip(live, logits.split([len(t) for t in parts]), strict=True):
            rows[i].append(block)
    for step in range(len(decode[0])):
        chunks = [
            Chunk([d[step]], len(p) + step, tables[i], 1)
            for i, (p, d) in enumerate(zip(prompts, decode, strict=True))
        ]
        for i, row in enumerate(runner.run(chunks, kernels).split(1)):
            rows[i].append(row)
    return [torch.cat(r) for r in rows]


def _prompts(seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (n,), generator=g).tolist() for n in (23, 11)]


# the stock kernels fuse q/k/v and gate/up with their biases: checked where that matters
CASES = [(name, INVARIANT) for name in sorted(FAMILIES)] + [
    (name, STOCK) for name in ("llama_linear", "qwen2", "qwen3_yarn")
]


@pytest.mark.parametrize(("name", "kernels"), CASES, ids=[f"{n}-{k.name}" for n, k in CASES])
def test_paged_prefill_and_decode_logits_match_transformers(saved, name, kernels):
    path, hf = saved(name)
    model = _ours(path)
    prompts = _prompts(0)
    decode = [
        [int(t) for t in torch.randint(0, 256, (3,), generator=torch.Generator().manual_seed(i))]
        for i in range(2)
    ]
    ours = _paged_logits(model, prompts, decode, kernels)
    for mine, prompt, extra in zip(ours, prompts, decode, strict=True):
        ref = _hf_logits(hf, prompt + extra)
        torch.testing.assert_close(mine, ref, atol=ATOL, rtol=RTOL, msg=f"{name}/{kernels.name}")


@pytest.mark.parametrize("name", ["llama3", "qwen2_tied", "qwen3_yarn"])
def test_engine_greedy_tokens_equal_transformers_generate(saved, name):
    path, hf = saved(name)
    engine = Engine.from_pretrained(path, EngineConfig(block_size=4, num_blocks=64, max_num_batched_tokens=8,
                                                       mode="batch_invariant", max_model_len=64))  # fmt: skip
    prompt = _prompts(3)[0]
    out = engine.generate([prompt], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))[0]
    with torch.no_grad():
        greedy = transformers.GenerationConfig(
            max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0
        )
        ids = torch.tensor([prompt])  # an explicit mask: pad id 0 may occur in the prompt
        ref = hf.generate(ids, attention_mask=torch.ones_like(ids), generation_config=greedy)[
            0, len(prompt) :
        ].tolist()
    assert out.token_ids == ref


def _config(path) -> dict:
    return json.loads((path / "config.json").read_text())


def _write(src, dst, raw: dict):
    """A folder with ``src``'s weights and ``raw`` as its config.json."""
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "config.json").write_text(json.dumps(raw))
    for f in src.glob("*.safetensors"):
        (dst / f.name).symlink_to(f)
    return dst


@pytest.mark.parametrize("name", ["llama3", "qwen3_yarn"])
def test_transformers_4_layout_reads_the_same_rope(saved, name):
    """Top-level rope_theta + rope_scaling (transformers 4) means the same model."""
    path, hf = saved(name)
    raw = _config(path)
    params = raw.pop("rope_parameters")
    raw["rope_theta"] = params.pop("rope_theta")
    raw["rope_scaling"] = params
    old = _write(path, path / "v4", raw)
    assert ModelConfig.from_pretrained(old).rope == ModelConfig.from_pretrained(path).rope
    prompt = _prompts(1)[0]
    ours = _paged_logits(DecoderModel.from_pretrained(old), [prompt], [[]], INVARIANT)[0]
    torch.testing.assert_close(ours, _hf_logits(hf, prompt), atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize(
    ("name", "without"),
    [
        ("llama3", {"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}}),
        (
            "llama3",
            {
                "rope_parameters": {
                    "rope_type": "llama3",
                    "rope_theta": 10000.0,
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192,
                }
            },
        ),
        ("llama_linear", {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
        ("qwen3_yarn", {"rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}),
        ("qwen3", {"model_type": "llama"}),  # no q/k norm (head_dim 32 kept)
        ("qwen2", {"model_type": "llama"}),  # no q/k/v biases
    ],
    ids=["llama3-scaling", "llama3-theta", "linear", "yarn", "qk-norm", "qkv-bias"],
)
def test_each_feature_moves_the_logits_far_beyond_the_tolerance(saved, name, without, tmp_path):
    """The cross-check can fail: dropping the feature changes logits by > 10x the tolerance."""
    path, hf = saved(name)
    raw = {
        k: v
        for k, v in _config(path).items()
        if k not in ("layer_types", "max_window_layers", "use_sliding_window", "sliding_window")
    }
    tensors = load_safetensors(path / "model.safetensors")
    cfg = ModelConfig.from_dict(raw | without)
    model = DecoderModel(cfg, {k: tensors[k] for k in _param_shapes(cfg)})
    prompt = _prompts(2)[0]
    ours = _paged_logits(model, [prompt], [[]], INVARIANT)[0]
    ref = _hf_logits(hf, prompt)
    assert (ours - ref).abs().max() > 10 * (ATOL + RTOL * ref.abs().max())


@pytest.mark.parametrize("name", ["llama3", "llama_linear", "llama_dynamic", "qwen3_yarn"])
def test_rope_frequencies_and_attention_factor_equal_transformers(saved, name):
    """At positions the logits tests cannot reach, the frequencies decide: compare them."""
    path, hf = saved(name)
    cfg = ModelConfig.from_pretrained(path)
    rope, rotary = cfg.rope, hf.model.rotary_emb
    assert torch.equal(_inv_freq(rope, 32 if "qwen3" in name else 16, cfg.max_context_len), rotary.inv_freq)
    assert _attention_factor(rope) == rotary.attention_scaling


def test_dynamic_ntk_is_capped_at_max_position_embeddings(saved):
    path, _ = saved("llama_dynamic")
    cfg = ModelConfig.from_pretrained(path)
    assert cfg.max_context_len == 4096
    with pytest.raises(InvalidArgumentError, match="exceeds the model's context of 4096"):
        Engine.from_pretrained(path, EngineConfig(max_model_len=4097, num_blocks=4))


def test_yarn_and_linear_extend_the_context_as_vllm_does():
    assert parse_rope({"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}},
                      40960).max_context_len(40960) == 131072  # fmt: skip
    assert parse_rope({"rope_scaling": {"type": "linear", "factor": 2.0}}, 4096).max_context_len(4096) == 8192


# --- sliding windows ------------------------------------------------------------


def _sliding_qwen2(saved, tmp_path, window: int):
    path, hf = saved("qwen2")
    raw = _config(path) | {"use_sliding_window": True, "sliding_window": window, "max_window_layers": 1}
    raw.pop("layer_types")
    return _write(path, tmp_path / f"w{window}", raw), hf


def test_a_sliding_window_that_would_apply_is_refused(saved, tmp_path):
    folder, _ = _sliding_qwen2(saved, tmp_path, 32)
    assert ModelConfig.from_pretrained(folder).sliding_window == 32
    with pytest.raises(
        InvalidArgumentError, match=r"sliding-window attention .window 32.*max_model_len <= 32"
    ):
        Engine.from_pretrained(folder, EngineConfig(max_model_len=33, num_blocks=16))
    engine = Engine.from_pretrained(folder, EngineConfig(num_blocks=16))  # default: capped at the window
    assert engine.max_model_len == 32


def test_a_window_wider_than_the_context_is_exact(saved, tmp_path):
    """Within the window, sliding and full attention are the same: logits equal transformers'
    (which applies the window) up to max_model_len."""
    folder, _ = _sliding_qwen2(saved, tmp_path, 40)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    assert hf.config.layer_types == ["full_attention", "sliding_attention"]
    engine = Engine.from_pretrained(folder, EngineConfig(block_size=4, num_blocks=32, mode="batch_invariant"))
    assert engine.max_model_len == 40
    prompt = _prompts(4)[0] + _prompts(5)[1] + [5] * 6  # 40 tokens: every key is inside the window
    ours = _paged_logits(engine.model, [prompt], [[]], INVARIANT)[0]
    torch.testing.assert_close(ours, _hf_logits(hf, prompt), atol=ATOL, rtol=RTOL)
    longer = prompt + [7] * 6  # past the window transformers drops keys: why the engine refuses it
    ours = _paged_logits(engine.model, [longer], [[]], INVARIANT)[0]
    assert (ours[40:] - _hf_logits(hf, longer)[40:]).abs().max() > 100 * ATOL


# --- refusals and EOS -------------------------------------------------------------


def _base(model_type="llama", **extra):
    return {"model_type": model_type, **_TINY, **extra}


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (
            _base(rope_scaling={"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}),
            "longrope",
        ),
        (_base(rope_scaling={"rope_type": "llama3", "factor": 8.0}), "needs"),
        (_base(rope_scaling={"rope_type": "linear", "factor": 2.0, "beta": 3}), r"\['beta'\]"),
        (_base(partial_rotary_factor=0.5), "partial_rotary_factor"),
        (_base(hidden_act="gelu"), "hidden_act"),
        (_base(quantization_config={"quant_method": "awq"}), "quantization_config"),
        (_base(num_experts=8), "num_experts"),
        (_base("qwen2", use_mrope=True), "use_mrope"),
        (_base("qwen2", layer_types=["full_attention", "chunked_attention"]), "chunked_attention"),
        (
            _base(
                rope_parameters={
                    "full_attention": {"rope_type": "default"},
                    "sliding_attention": {"rope_type": "default"},
                }
            ),
            "per layer",
        ),
        (
            _base(
                rope_scaling={"rope_type": "linear", "factor": 2.0},
                rope_parameters={"rope_type": "linear", "factor": 3.0},
            ),
            "differ",
        ),
        (_base(eos_token_id=[1, "2"]), "eos_token_id"),
        (_base("qwen3", head_dim=15), "even"),
    ],
)
def test_unimplemented_fields_are_refused_by_name(raw, match):
    with pytest.raises(InvalidArgumentError, match=match):
        ModelConfig.from_dict(raw)


def test_defaults_follow_the_transformers_classes():
    qwen3 = ModelConfig.from_dict(_base("qwen3"))
    assert (qwen3.head_dim, qwen3.max_position_embeddings, qwen3.qk_norm) == (128, 32768, True)
    llama = ModelConfig.from_dict(_base())
    assert (llama.head_dim, llama.max_position_embeddings, llama.qkv_bias) == (16, 2048, False)
    qwen2 = ModelConfig.from_dict(_base("qwen2"))
    assert (qwen2.qkv_bias, qwen2.o_bias, qwen2.num_key_value_heads, qwen2.sliding_window) == (
        True,
        False,
        2,
        None,
    )


def test_eos_ids_from_config_and_generation_config(saved, tmp_path):
    path, _ = saved("qwen3")
    raw = _config(path) | {"eos_token_id": 7}
    folder = _write(path, tmp_path / "eos", raw)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [9, 7, 11]}))
    assert checkpoint_eos_ids(folder) == (7, 9, 11)
    engine = Engine.from_pretrained(folder, EngineConfig(block_size=4, num_blocks=32, eos_token_ids=(9, 11),
                                                         eos_token_id=7))  # fmt: skip
    prompt = _prompts(6)[0]
    free = engine.generate([prompt], SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True))[
        0
    ].token_ids
    stop_at = free[5]
    engine = Engine.from_pretrained(
        folder, EngineConfig(block_size=4, num_blocks=32, eos_token_ids=(stop_at,))
    )
    out = engine.generate([prompt], SamplingParams(max_tokens=40, temperature=0.0))[0]
    assert out.finish_reason == "stop" and out.token_ids == free[: free.index(stop_at) + 1]
