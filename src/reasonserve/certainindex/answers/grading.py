"""Optional reference grading with Math-Verify, for offline work only (replay, calibration).

``pip install reasonserve[grading]`` installs ``math-verify``. Math-Verify hands model
text to sympy and bounds it with ``SIGALRM``, which only works on a main thread and
cannot stop a runaway C-level computation, so it never runs in the serving path.
:class:`ReferenceGrader` runs it in a separate worker *process* and waits at most
``timeout_s`` per pair: on a timeout the worker is killed (and restarted for the next
pair) and the verdict is ``None``. Use it as a drop-in for :func:`equivalent` where a
grading callable is accepted, e.g. ``load_run(folder, grade=grader)``.
"""

from __future__ import annotations

import importlib.util
import multiprocessing as mp
from multiprocessing.connection import Connection

from reasonserve.core.errors import ImplementationUnavailableError, InvalidArgumentError

__all__ = ["ReferenceGrader", "reference_grader_available"]


def reference_grader_available() -> bool:
    """Whether ``math-verify`` is installed (the ``[grading]`` extra)."""
    return importlib.util.find_spec("math_verify") is not None


def _serve(conn: Connection) -> None:  # pragma: no cover - runs in the worker process
    import logging

    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout disabled": ours is outside

    configs = [LatexExtractionConfig(), ExprExtractionConfig()]
    while True:
        try:
            item = conn.recv()
        except EOFError:
            return
        if item is None:
            return
        gold, prediction, wrap = item
        try:
            texts = [f"${t}$" if wrap else t for t in (gold, prediction)]
            parsed = [parse(t, configs, parsing_timeout=None) for t in texts]
            conn.send(bool(verify(parsed[0], parsed[1], timeout_seconds=None)))
        except Exception:  # a grading failure is "not equal", as Math-Verify reports it
            conn.send(False)


class ReferenceGrader:
    """Math-Verify in a worker process with a hard per-pair timeout.

    ``grade(gold, prediction)`` returns True/False, or None when the pair took longer
    than ``timeout_s``. ``wrap_math=True`` (the default) wraps both sides in ``$...$``
    so bare answers (``\\frac{1}{2}``) are read as LaTeX, as answers extracted from a
    model output are. Not thread-safe: one grader per thread.
    """

    def __init__(self, *, timeout_s: float = 5.0, wrap_math: bool = True) -> None:
        if not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise InvalidArgumentError(f"timeout_s must be > 0, got {timeout_s!r}")
        if not reference_grader_available():
            raise ImplementationUnavailableError(
                "ReferenceGrader needs math-verify: pip install 'reasonserve[grading]'"
            )
        self.timeout_s, self.wrap_math = float(timeout_s), wrap_math
        self.num_timeouts = 0
        self._warm = False  # the worker has imported math-verify and answered once
        self._context = mp.get_context("spawn")
        self._process: mp.process.BaseProcess | None = None
        self._conn: Connection | None = None

    def _start(self) -> Connection:
        parent, child = self._context.Pipe()
        self._process = self._context.Process(target=_serve, args=(child,), daemon=True)
        self._process.start()
        child.close()
        self._conn = parent
        return parent

    def grade(self, gold: str | None, prediction: str | None) -> bool | None:
        if not gold or not prediction:
            return False
        conn = self._conn or self._start()
        conn.send((gold, prediction, self.wrap_math))
        # the first call also waits for the worker to import sympy
        if conn.poll(self.timeout_s if self._warm else self.timeout_s + 60):
            self._warm = True
            return conn.recv()
        self.num_timeouts += 1
        self._kill()
        return None

    def __call__(self, a: str | None, b: str | None) -> bool:
        """:func:`equivalent`-shaped: a timeout counts as "not equal"."""
        return self.grade(b, a) is True

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join(timeout=5)
        if self._conn is not None:
            self._conn.close()
        self._process, self._conn, self._warm = None, None, False

    def close(self) -> None:
        """Stop the worker process."""
        if self._conn is not None and self._process is not None and self._process.is_alive():
            try:
                self._conn.send(None)
                self._process.join(timeout=2)
            except (BrokenPipeError, OSError):
                pass
        self._kill()

    def __enter__(self) -> ReferenceGrader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
