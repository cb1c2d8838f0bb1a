"""Compile the simulator's per-step modules with mypyc, in place beside their sources.

``make test`` / ``make demo`` run it; by hand: ``.venv/bin/python scripts/compile_sim.py``
(``--clean`` removes what it built). Optional: when mypyc is missing or the build fails
it says so in one line and exits 0, and the package runs the Python sources (the same
code; ``reasonserve.native`` picks). The modules and the manifest of their sources'
digests come from ``src/reasonserve/native.py``.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PACKAGE = SRC / "reasonserve"
# mypy as mypyc needs it: the compiled modules checked, third-party packages not followed
MYPY_CONFIG = """\
[mypy]
ignore_missing_imports = True
follow_imports = silent

[mypy-torch.*,numpy.*,scipy.*,matplotlib.*,transformers.*,triton.*]
follow_imports = skip
"""


def _native():
    spec = importlib.util.spec_from_file_location("_reasonserve_native", PACKAGE / "native.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def clean(native) -> None:
    """Remove every extension module of the set's packages (also one of a module no longer
    in the set), the shared library and the manifest; and what builds before the set took
    in policy code wrote (their library, their manifest in the simulator package)."""
    dirs = {native.source_path(m, PACKAGE).parent for m in native.MODULES}
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        built = [p for d in dirs for p in d.glob(f"*{suffix}")]
        for path in [*built, *SRC.glob(f"reasonserve_*__mypyc{suffix}")]:
            path.unlink()
    for manifest in (PACKAGE / native.MANIFEST, PACKAGE / "sim" / native.MANIFEST):
        manifest.unlink(missing_ok=True)


def build(native) -> None:
    from mypyc.build import mypycify
    from setuptools import setup

    manifest = native.manifest(PACKAGE)  # the digests of what is compiled, read before the build
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "mypy.ini"
        config.write_text(MYPY_CONFIG)
        paths = [str(native.source_path(m, PACKAGE).relative_to(SRC)) for m in native.MODULES]
        here = os.getcwd()
        os.chdir(SRC)  # mypyc names the modules from the paths and writes the shared library here
        try:
            extensions = mypycify(
                ["--config-file", str(config), "--cache-dir", str(ROOT / "build" / "mypy_cache"), *paths],
                opt_level="3", group_name=native.GROUP,
                target_dir=str(Path(tmp) / "c"),
            )  # fmt: skip
            args = ["build_ext", "--inplace", "--build-temp", f"{tmp}/o", "--build-lib", f"{tmp}/l"]
            setup(name="reasonserve-sim-native", ext_modules=extensions, script_args=args)
        finally:
            os.chdir(here)
    (PACKAGE / native.MANIFEST).write_text(json.dumps(manifest, indent=1))


def main(argv: list[str]) -> int:
    native = _native()
    clean(native)
    if "--clean" in argv:
        return 0
    try:
        build(native)
    except (Exception, SystemExit) as err:  # no mypyc, a type error, no compiler: run the sources
        clean(native)
        print(f"reasonserve: simulator modules not compiled ({type(err).__name__}: {err}); "
              "the Python sources run")  # fmt: skip
        return 0
    print(f"reasonserve: compiled the {len(native.MODULES)} modules of the simulator's per-step path "
          f"({native.GROUP})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
