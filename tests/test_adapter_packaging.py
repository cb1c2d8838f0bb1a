"""Packaging of the engine adapters: the extras pull no engine (and so no CUDA torch),
and the entry points name classes and functions that exist (checked without importing
vLLM or SGLang)."""

import ast
import pathlib

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_engine_extras_pull_no_engine_and_no_torch():
    extras = PROJECT["optional-dependencies"]
    for name in ("vllm", "sglang"):
        assert name in extras
        pulled = {req.split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip().lower() for req in extras[name]}
        assert not pulled & {"vllm", "sglang", "torch", "torchvision", "torchaudio"}, (name, pulled)


def _defined(target: str) -> bool:
    module, name = target.split(":")
    path = ROOT / "src" / pathlib.Path(*module.split(".")).with_suffix(".py")
    tree = ast.parse(path.read_text())
    return any(isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name for n in tree.body)


def test_entry_points_name_existing_objects():
    eps = PROJECT["entry-points"]
    assert eps["vllm.logits_processors"] == {
        "reasonserve_seeded_sampling": "reasonserve.adapters.vllm.logits_v2:SeededSamplingPlugin"
    }
    assert eps["sglang.srt.plugins"] == {"reasonserve_phase_aware": "reasonserve.adapters.sglang.plugin:register"}
    for group in eps.values():
        for target in group.values():
            assert _defined(target), target


def test_adapters_import_without_the_engines():
    import reasonserve.adapters.cli
    import reasonserve.adapters.sglang
    import reasonserve.adapters.vllm

    assert "SeededSamplingPlugin" in reasonserve.adapters.vllm.__all__
    assert "register" in reasonserve.adapters.sglang.__all__
    assert reasonserve.adapters.cli.engine_command("vllm").argv[:2] == ("vllm", "serve")


def test_the_seeded_sglang_shim_needs_the_processor_string():
    from reasonserve.adapters.sglang import SeededSGLangShim
    from reasonserve.core.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="to_str"):
        SeededSGLangShim()
