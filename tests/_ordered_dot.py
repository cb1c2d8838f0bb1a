"""A BLAS-free, K-ordered ``tl.dot`` for the Triton interpreter.

The interpreter computes ``tl.dot`` with ``numpy.matmul``, i.e. with the host BLAS,
whose reduction order may depend on a row's slot inside the call (OpenBLAS's Haswell
kernel on AMD Zen does). A Triton invariance test must test our kernel's reduction
order, not the host BLAS: this replacement sums ``a[:, k] * b[k, :]`` in order of
``k`` with element-wise numpy operations (each correctly rounded), then adds the
accumulator, as the interpreter does.
"""

from __future__ import annotations

import numpy as np


def ordered_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
    from triton.runtime.interpreter import TensorHandle

    out_dtype = d.data.dtype
    a_data, b_data = a.data.astype(out_dtype), b.data.astype(out_dtype)
    acc = np.zeros(a_data.shape[:-1] + b_data.shape[-1:], dtype=out_dtype)
    for k in range(a_data.shape[-1]):
        acc = acc + a_data[..., k : k + 1] * b_data[..., k : k + 1, :]
    return TensorHandle(acc + d.data, d.dtype.scalar)


def install(monkeypatch) -> None:
    """Route the interpreter's ``tl.dot`` through :func:`ordered_dot` for one test."""
    from triton.runtime import interpreter

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", ordered_dot)
