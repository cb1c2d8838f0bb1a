"""``scripts/gpu_check.sh``, the one prepared GPU run: on CPU, what it does when stages
fail, hang or find no GPU (docs/gpu_first_run.md). A stand-in ``PYTHON`` plays the
stages where the real ones would need a GPU; ``--dry-run`` runs the real commands."""

import os
import pathlib
import shutil
import stat
import subprocess
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash and coreutils timeout"
)

# Plays each stage's command: the kernel tests fail, the benchmark hangs, the rest pass;
# the environment stage finds torch and CUDA unless NO_TORCH / NO_CUDA is set (exit 4 / 3,
# as scripts/gpu_env.py would).
_STAND_IN = """#!/usr/bin/env bash
case "$*" in
  *gpu_env.py*--require-cuda*) echo "stand-in env"; [ -z "${NO_TORCH:-}" ] || exit 4
                               [ -z "${NO_CUDA:-}" ] || exit 3 ;;
  *test_gpu_kernels.py*) echo "1 failed"; exit 1 ;;
  *benchmarks/gpu.py*) echo "bench started"; exec sleep 60 ;;
  *) echo "ran $*" ;;
esac
"""


def _stand_in(tmp_path) -> pathlib.Path:
    python = tmp_path / "python"
    python.write_text(_STAND_IN)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return python


def _run(tmp_path, *args, python=sys.executable, budget=None, min_stage=None, **extra):
    env = dict(os.environ, OUT=str(tmp_path / "out"), PYTHON=str(python), **extra)
    env.pop("TRITON_INTERPRET", None)
    if budget is not None:
        env |= {"GPU_CHECK_BUDGET_S": str(budget), "GPU_CHECK_MIN_STAGE_S": str(min_stage)}
    done = subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    return done, (tmp_path / "out" / "summary.txt").read_text().splitlines()


def test_a_failing_and_a_hanging_stage_leave_the_others_and_every_log(tmp_path):
    done, summary = _run(tmp_path, "env", "kernels", "bench", "engine", python=_stand_in(tmp_path), budget=4,
                         min_stage=1)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    status = {line.split(":")[0]: line for line in summary}
    assert status["env"].startswith("env: ok")
    assert status["kernels"].startswith("kernels: FAILED (exit 1)")
    assert status["bench"].startswith("bench: TIMEOUT")  # killed at the budget, not after 60 s
    assert status["engine"].startswith("engine: SKIPPED")
    out = tmp_path / "out"
    assert "1 failed" in (out / "02-kernels.log").read_text()
    assert "bench started" in (out / "03-bench.log").read_text()
    assert "--budget-s" in (out / "03-bench.log").read_text()


def test_unknown_stage_is_refused_before_anything_runs(tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), "benchmark"], cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, OUT=str(tmp_path / "out")))  # fmt: skip
    assert done.returncode == 64 and "unknown stage" in done.stdout
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("missing", "code", "message"), [
    ("NO_CUDA", 3, "no CUDA device here"), ("NO_TORCH", 4, "cannot import torch: set PYTHON"),
])  # fmt: skip
def test_without_cuda_or_torch_it_stops_after_the_environment_with_a_clear_message(
    tmp_path, missing, code, message
):
    done, summary = _run(tmp_path, "env", "kernels", python=_stand_in(tmp_path), **{missing: "1"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert summary[0].startswith(f"env: FAILED (exit {code})") and message in summary[1]
    assert len(summary) == 2  # the kernels stage never started
    assert "stand-in env" in (tmp_path / "out" / "01-env.log").read_text()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer without a CUDA device")
def test_environment_report_requires_cuda_only_when_asked(capsys):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gpu_env
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert gpu_env.main([]) == 0
    assert gpu_env.main(["--require-cuda"]) == 3
    out = capsys.readouterr().out
    assert "cuda available: False" in out and "TILES_PER_M_BUCKET=" in out and "torch " in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run is the CPU walk-through")
def test_dry_run_walks_the_real_stages_on_cpu(tmp_path):
    pytest.importorskip("triton", reason="the kernel tests import triton")
    done, summary = _run(tmp_path, "--dry-run", "kernels")
    assert done.returncode == 0, done.stdout + done.stderr
    assert summary[0].startswith("(--dry-run") and summary[1].startswith("kernels: ok")
    kernels = (tmp_path / "out" / "01-kernels.log").read_text()
    assert "skipped" in kernels and "needs a CUDA device" in kernels  # collected, imported, skipped
    assert (tmp_path / "out" / "kernels.xml").is_file()
