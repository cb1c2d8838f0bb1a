"""Where the command line finds recorded data, and output paths checked before the work.

The data root is, in order: the ``--data`` flag; the ``REASONSERVE_DATA`` environment
variable (read when a command runs, never at import); ``../shared/data`` beside the
source checkout this package was loaded from. The working directory plays no part, so
``reasonserve sim`` and ``reasonserve replay`` work from any folder.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["DATA_ENV", "checked_output", "checkout_data", "data_root"]

DATA_ENV = "REASONSERVE_DATA"


def checkout_data() -> pathlib.Path:
    """``../shared/data`` beside the checkout (``<repo>/src/reasonserve`` -> ``<repo>/../shared/data``)."""
    return pathlib.Path(__file__).resolve().parents[3] / "shared" / "data"


def data_root(flag: str | os.PathLike | None, env: Mapping[str, str] | None = None) -> pathlib.Path:
    """The recorded-data folder (see the module docstring), or a clear error naming all three."""
    environ = os.environ if env is None else env
    if flag is not None:
        return _existing(pathlib.Path(flag), "--data")
    if environ.get(DATA_ENV):
        return _existing(pathlib.Path(environ[DATA_ENV]), f"${DATA_ENV}")
    beside = checkout_data()
    if beside.is_dir():
        return beside
    raise InvalidArgumentError(
        f"no recorded data found: pass --data DIR, or set {DATA_ENV}=DIR, or run from a source checkout "
        f"with the data at {beside}"
    )


def _existing(path: pathlib.Path, source: str) -> pathlib.Path:
    if not path.is_dir():
        raise InvalidArgumentError(f"{source} {path}: no such folder")
    return path


def checked_output(flag: str, path: str | os.PathLike) -> pathlib.Path:
    """``path`` when a file can be written there: its folder exists and is writable, and it is
    not a folder itself. Checked before a command starts, so no work is lost to a typo."""
    target = pathlib.Path(path)
    folder = target.parent
    if target.is_dir():
        raise InvalidArgumentError(f"{flag} {target}: is a folder, not a file")
    if not folder.is_dir():
        raise InvalidArgumentError(f"{flag} {target}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise InvalidArgumentError(f"{flag} {target}: folder {folder} is not writable")
    return target
