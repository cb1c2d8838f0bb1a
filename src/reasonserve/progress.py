"""A progress bar on stderr for the long commands (replay, calibrate, check-determinism,
the demos, the benchmarks): drawn only on a terminal, so logs and pipes stay clean."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from typing import TextIO, TypeVar

__all__ = ["ProgressBar", "track"]

T = TypeVar("T")


class ProgressBar:
    """``update(done, total)`` redraws ``label [#####.....] done/total unit`` in place.

    Silent when ``stream`` (default: stderr, looked up at construction) is not a
    terminal, or with ``enabled=False``. The line is written only when its text
    changes, so a caller may report every item. Use as a context manager, or call
    :meth:`close` to end the line.
    """

    WIDTH = 30

    def __init__(self, label: str, *, unit: str = "", stream: TextIO | None = None,
                 enabled: bool | None = None) -> None:  # fmt: skip
        self.label, self.unit = label, unit
        self.stream = sys.stderr if stream is None else stream
        self.enabled = _is_terminal(self.stream) if enabled is None else enabled
        self._shown: str | None = None

    def update(self, done: int, total: int, note: str = "") -> None:
        if not self.enabled:
            return
        filled = self.WIDTH * min(done, total) // max(total, 1)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        text = " ".join(part for part in (f"{self.label} [{bar}] {done}/{total}", self.unit, note) if part)
        if text != self._shown:
            padding = " " * max(0, len(self._shown or "") - len(text))  # erase a longer previous line
            self.stream.write(f"\r{text}{padding}")
            self.stream.flush()
            self._shown = text

    __call__ = update

    def close(self) -> None:
        """End the line (when one was drawn)."""
        if self._shown is not None:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = None

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def track(items: Sequence[T], label: str, *, unit: str = "", stream: TextIO | None = None) -> Iterator[T]:
    """Yield ``items`` while a :class:`ProgressBar` counts them (``for x in track(xs, "bench")``)."""
    with ProgressBar(label, unit=unit, stream=stream) as bar:
        for done, item in enumerate(items):
            bar.update(done, len(items))
            yield item
        bar.update(len(items), len(items))


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
