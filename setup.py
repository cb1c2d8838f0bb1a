"""Builds the fixed-order CPU kernels (``reasonserve._C``) at install.

Build against the torch you run: ``pip install --no-build-isolation .`` (an isolated
build has no torch). Without torch at build time, without a C++ compiler, or when the
build fails, the package still installs, and ``reasonserve.ops`` runs the kernels'
torch transcription: the same bits, much slower, with a one-line warning
(``docs/determinism.md``). Nothing is compiled at run time.
"""

import os

from setuptools import setup

SOURCES = ["ops.cpp", "kernels_generic.cpp", "kernels_avx2.cpp", "kernels_avx512.cpp", "seeded_sample.cpp"]
CSRC = os.path.join("src", "reasonserve", "_csrc")
# -ffp-contract=off: no fused multiply-add the compiler picks by itself; the bits of
# every variant must follow the order written in fixed_order.h. -fno-trapping-math
# only lets compares become blends (no FP exception flags are read); values unchanged.
CFLAGS = ["-O3", "-std=c++17", "-ffp-contract=off", "-fno-trapping-math", "-Wno-psabi", "-fopenmp"]
# at::parallel_for is a header template over OpenMP: without -fopenmp it runs on one
# thread. The libgomp.so.1 it links resolves, at run time, to the one torch has loaded.
LDFLAGS = ["-fopenmp"]


def _native():
    if os.environ.get("REASONSERVE_BUILD_NATIVE", "1") == "0":
        return [], {}
    try:
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except ImportError:
        print("reasonserve: torch is not importable at build time (an isolated build?): native kernels not "
              "built; ops run their slow torch transcription. Build them: pip install --no-build-isolation .")
        return [], {}

    class OptionalBuild(BuildExtension):
        def run(self):
            try:
                super().run()
            except Exception as err:  # no compiler, or a compile error: install anyway
                print(f"reasonserve: native kernels not built ({err}); ops run their torch transcription")
                self.extensions = []

    ext = CppExtension(
        "reasonserve._C", [os.path.join(CSRC, s) for s in SOURCES], extra_compile_args=CFLAGS,
        extra_link_args=LDFLAGS,
    )
    return [ext], {"build_ext": OptionalBuild.with_options(use_ninja=True)}


ext_modules, cmdclass = _native()
setup(ext_modules=ext_modules, cmdclass=cmdclass)
