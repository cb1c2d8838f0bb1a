"""docs/use_openai.md's copy-paste blocks, run as written (only the folder and the port
are changed): make the checkpoint, start ``reasonserve serve``, run the client."""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import socket
import subprocess
import sys

import pytest

pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from _live_server import TIMEOUT_S

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "use_openai.md"


def _blocks() -> tuple[list[str], str]:
    section = DOC.read_text().split("## Copy-paste: `reasonserve serve`", 1)[1]
    shell = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    client = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    commands = [line for line in shell.splitlines() if line and not line.startswith("#")]
    return commands, client


def test_the_copy_paste_server_and_client_work(tmp_path):
    commands, client = _blocks()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    folder = str(tmp_path / "tiny")
    make, serve = (c.replace("/tmp/tiny", folder).replace("8000", port) for c in commands)
    argv = shlex.split(make)
    assert argv[0] == "python"
    subprocess.run([sys.executable, *argv[1:]], check=True, timeout=TIMEOUT_S, capture_output=True)
    argv = shlex.split(serve.rstrip(" &"))
    assert argv[0] == "reasonserve"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "reasonserve", *argv[1:]], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)  # fmt: skip
    try:
        banner = proc.stdout.readline()
        assert banner.strip() == f"reasonserve serve: model 'tiny' at http://127.0.0.1:{port}/v1"
        code = client.replace("8000", port)
        out = _run_client(code, env)
        assert out.returncode == 0, out.stderr[-2000:]
        exit_kind, tokens = out.stdout.split()[-2:]  # the answer before them may hold spaces
        assert exit_kind in ("budget", "finished", "early") and 0 < int(tokens) <= 256
    finally:
        proc.terminate()
        proc.wait(timeout=TIMEOUT_S)


def _run_client(code: str, env: dict) -> subprocess.CompletedProcess:
    """The client block, retried while the server is still binding its port."""
    import httpx

    from _live_server import wait_until

    url = re.search(r"http://127\.0\.0\.1:\d+", code).group(0)
    assert wait_until(lambda: _healthy(httpx, url), timeout_s=60)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


def _healthy(httpx, url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
