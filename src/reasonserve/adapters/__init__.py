"""Adapters that host reasonserve's policies on other serving runtimes. Each subpackage
imports its runtime only when imported itself (``reasonserve.adapters.ray_serve`` needs
the ``ray`` extra)."""

__all__: list[str] = []
