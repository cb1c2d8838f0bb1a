"""KV of one model as a prefix cache of tree nodes (prompt, steps), vLLM-style.

A node is resident or not. Resident nodes used by a running sequence are pinned; the
others stay cached (prefix caching) and are evicted least recently used first when space
is needed. Tokens of a sequence's unfinished step are its private KV, counted by the
caller in ``private``. ``used`` never exceeds ``capacity`` (callers make room first).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["NodeCache"]


class NodeCache:
    def __init__(self, capacity_tokens: int) -> None:
        if isinstance(capacity_tokens, bool) or not isinstance(capacity_tokens, int) or capacity_tokens < 1:
            raise InvalidArgumentError(f"capacity_tokens must be an int >= 1, got {capacity_tokens!r}")
        self.capacity = capacity_tokens
        self.tokens: dict[str, int] = {}  # resident node -> its tokens
        self.pins: dict[str, int] = {}
        self.lru: OrderedDict[str, None] = OrderedDict()  # resident and unpinned, oldest first
        self._used = 0  # tokens of resident nodes
        self.evictable = 0  # tokens of resident unpinned nodes
        self.private = 0  # tokens of unfinished steps (sequences' own KV)
        self.evicted_tokens = 0

    @property
    def used(self) -> int:
        return self._used + self.private

    def missing(self, path: Iterable[str], sizes: dict[str, int]) -> tuple[int, int]:
        """(tokens cached, tokens to recompute) of ``path`` (the cached prefix stops at the
        first missing node: attention needs every earlier token)."""
        cached, missing, hit = 0, 0, True
        for node in path:
            if hit and node in self.tokens:
                cached += sizes[node]
            else:
                hit = False
                missing += sizes[node]
        return cached, missing

    def make_room(self, need: int) -> bool:
        """Evict unpinned nodes (oldest first) until ``need`` more tokens fit."""
        while self._used + self.private + need > self.capacity and self.lru:
            node, _ = self.lru.popitem(last=False)
            size = self.tokens.pop(node)
            self._used -= size
            self.evictable -= size
            self.evicted_tokens += size
        return self._used + self.private + need <= self.capacity

    def pin(self, path: Iterable[str], sizes: dict[str, int]) -> None:
        """Make ``path`` resident (the caller made room) and pin it."""
        for node in path:
            if node not in self.tokens:
                self.tokens[node] = sizes[node]
                self._used += sizes[node]
            elif node in self.lru:
                del self.lru[node]
                self.evictable -= self.tokens[node]
            self.pins[node] = self.pins.get(node, 0) + 1

    def unpin(self, path: Iterable[str]) -> None:
        for node in path:
            left = self.pins[node] - 1
            if left:
                self.pins[node] = left
            else:
                del self.pins[node]
                self.lru[node] = None
                self.evictable += self.tokens[node]

    def add(self, node: str, size: int) -> None:
        """A finished step's KV becomes a cached node (unpinned); the caller moves the
        tokens out of ``private`` first."""
        if node in self.tokens:
            return
        self.tokens[node] = size
        self._used += size
        self.lru[node] = None
        self.evictable += size
