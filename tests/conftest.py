"""Test configuration: Triton interpreter on CPU-only machines, hypothesis profiles."""

import os

# One intra-op thread per test process (before torch is imported, so server subprocesses
# inherit it): the suite's tensors are tiny, and on 2 cores pytest runs beside server
# subprocesses, where OpenMP's spinning threads oversubscribe the cores (a sample of the
# engine and ops tests: 3x the wall time with 2 threads on a loaded 2-core box). Tests of
# thread counts set their own (tests/test_native_kernels.py). Override with OMP_NUM_THREADS.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
from hypothesis import HealthCheck, settings

# Triton reads TRITON_INTERPRET when a kernel is defined: set it before any test
# imports the kernels, and only where there is no GPU to run them for real.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

settings.register_profile(
    "default",
    deadline=None,
    derandomize=True,  # CI runs the same examples every time: no flaky reruns
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` skip cleanly, with a reason, where there is no CUDA."""
    import pytest

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; this machine has none")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
