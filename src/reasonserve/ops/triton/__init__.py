"""Triton kernels for CUDA (also run on CPU by the Triton interpreter in tests).

Import these modules only after deciding to use Triton: they import ``triton``.
Tile sizes are fixed per device kind and dtype and never depend on the number of
rows, which is what makes the kernels batch-invariant.
"""
