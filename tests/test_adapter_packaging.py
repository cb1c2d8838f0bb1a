"""Packaging of the engine adapters: the extras pull no engine (and so no CUDA torch),
and the entry points name classes and functions that exist (checked without importing
vLLM or SGLang)."""

import ast
import os
import pathlib
import subprocess
import sys

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
    """A top-level class or function, or a name the module's ``__getattr__`` resolves."""
    module, name = target.split(":")
    path = ROOT / "src" / pathlib.Path(*module.split(".")).with_suffix(".py")
    source = path.read_text()
    tree = ast.parse(source)
    defined = any(isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name for n in tree.body)
    return defined or (f'name == "{name}"' in source and any(
        isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body))  # fmt: skip


def test_entry_points_name_existing_objects():
    eps = PROJECT["entry-points"]
    assert eps["vllm.logits_processors"] == {
        "reasonserve_seeded_sampling": "reasonserve.adapters.vllm.entry:SeededSamplingPlugin"
    }
    assert eps["sglang.srt.plugins"] == {"reasonserve_phase_aware": "reasonserve.adapters.sglang.plugin:register"}
    for group in eps.values():
        for target in group.values():
            assert _defined(target), target


def test_entry_point_modules_import_no_engine_and_nothing_else_of_reasonserve():
    """What vLLM / SGLang import at start-up from reasonserve: the entry modules and the
    package root only (no engine module, no policies, no adapters' engine-side code)."""
    code = ("import sys, reasonserve.adapters.vllm.entry, reasonserve.adapters.sglang.plugin; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('vllm', 'sglang', 'triton') "
            "or m.startswith(('reasonserve.policies', 'reasonserve.engine', 'reasonserve.adapters.phase_book', "
            "'reasonserve.adapters.seeded', 'reasonserve.adapters.vllm.logits'))))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")})  # fmt: skip
    assert out.stdout.strip() == "[]", out.stdout


def test_the_sglang_plugin_never_raises(caplog):
    from reasonserve.adapters.sglang import plugin

    for bad in ("{not json", "{}", '{"think_end_token_id": 5, "quantum": 64}', '{"think_end_token_id": -1}'):
        caplog.clear()
        with caplog.at_level("WARNING", logger=plugin.__name__):
            assert plugin.register({plugin.ENV_SETTINGS: bad}) is False
        assert len(caplog.records) == 1 and "is off" in caplog.records[0].getMessage()


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
