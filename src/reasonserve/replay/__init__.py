"""Replaying certainindex on real recorded data (probe streams, self-consistency sets).

Readers take paths; nothing here ships data. The default data root is
``../shared/data`` relative to the repository root (``--data`` overrides it).
"""
