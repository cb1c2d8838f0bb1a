"""Paged KV-cache bookkeeping: fixed-size blocks, reference counts, prefix sharing, CoW.

The manager only tracks block ids; the engine owns the KV tensors and performs the
copies the manager asks for. A full block whose KV has been computed is registered
under a hash of (previous block's hash, its tokens), so a later prompt with the same
prefix reuses it instead of recomputing. Blocks are reference counted: forks share
blocks, and writing into a shared block first copies it (copy-on-write). A ``salt``
starts the hash chain in its own namespace: KV computed by the DVR fast path's stock
kernels is never shared with a request whose KV must come from the invariant kernels.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["BlockManager", "OutOfBlocks"]


class OutOfBlocks(Exception):
    """Not enough free blocks; the caller preempts something and retries."""


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise InvalidArgumentError("num_blocks and block_size must be >= 1")
        self.num_blocks, self.block_size = num_blocks, block_size
        self._free: deque[int] = deque(range(num_blocks))
        self._ref = [0] * num_blocks
        self._hash_of: list[int | None] = [None] * num_blocks
        self._by_hash: dict[int, int] = {}

    @property
    def num_free(self) -> int:
        return len(self._free)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def _take(self) -> int:
        if not self._free:
            raise OutOfBlocks
        block = self._free.popleft()
        old_hash = self._hash_of[block]
        if old_hash is not None:  # evict a cached prefix block
            self._by_hash.pop(old_hash, None)
            self._hash_of[block] = None
        self._ref[block] = 1
        return block

    @staticmethod
    def chain_hash(parent: int | str | None, tokens: Sequence[int]) -> int:
        return hash((parent, tuple(tokens)))

    def allocate_prompt(self, tokens: Sequence[int], salt: str | None = None) -> tuple[list[int], int]:
        """Blocks for a prompt: reuse cached full-block prefixes, allocate the rest.

        Returns the block table and how many leading tokens already have KV. At least one
        token is always left to compute (its logits are needed).
        """
        needed = self.blocks_for(len(tokens))
        table: list[int] = []
        parent: int | str | None = salt
        cached = 0
        full = (len(tokens) - 1) // self.block_size  # never reuse the block holding the last token
        for b in range(full):
            h = self.chain_hash(parent, tokens[b * self.block_size : (b + 1) * self.block_size])
            block = self._by_hash.get(h)
            if block is None:
                break
            if self._ref[block] == 0:
                self._free.remove(block)
            self._ref[block] += 1
            table.append(block)
            parent, cached = h, cached + self.block_size
        if needed - len(table) > self.num_free:
            self.free(table)
            raise OutOfBlocks
        table += [self._take() for _ in range(needed - len(table))]
        return table, cached

    def allocate(self, num_blocks: int) -> list[int]:
        """``num_blocks`` fresh blocks (for swapped-in KV), or OutOfBlocks with nothing taken."""
        if num_blocks > self.num_free:
            raise OutOfBlocks
        return [self._take() for _ in range(num_blocks)]

    def register_full_blocks(
        self, table: Sequence[int], tokens: Sequence[int], num_computed: int, salt: str | None = None
    ) -> None:
        """Make the computed full blocks of a sequence reusable by later prompts."""
        parent: int | str | None = salt
        for b in range(min(len(table), num_computed // self.block_size)):
            h = self.chain_hash(parent, tokens[b * self.block_size : (b + 1) * self.block_size])
            block = table[b]
            if self._hash_of[block] is None and h not in self._by_hash:
                self._hash_of[block] = h
                self._by_hash[h] = block
            parent = h

    def ensure_capacity(self, table: list[int], num_tokens: int) -> list[tuple[int, int]]:
        """Grow ``table`` to hold ``num_tokens``; copy-on-write the block being written.

        Returns ``(src, dst)`` block copies the caller must perform before writing.
        """
        copies = []
        last = (num_tokens - 1) // self.block_size
        shared = last < len(table) and self._ref[table[last]] > 1
        if int(shared) + max(0, self.blocks_for(num_tokens) - len(table)) > self.num_free:
            raise OutOfBlocks  # checked first: a failed call changes nothing
        if shared:
            dst = self._take()
            copies.append((table[last], dst))
            self._ref[table[last]] -= 1
            table[last] = dst
        while len(table) < self.blocks_for(num_tokens):
            table.append(self._take())
        return copies

    def released_by(self, tables: Sequence[Sequence[int]]) -> int:
        """How many blocks would become free if ``tables`` were freed (shared blocks count
        once, and only when no other table holds them)."""
        drops: dict[int, int] = {}
        for table in tables:
            for block in table:
                drops[block] = drops.get(block, 0) + 1
        return sum(1 for block, n in drops.items() if self._ref[block] == n)

    def exclusive(self, table: Sequence[int]) -> int:
        """Blocks of ``table`` that no other table holds."""
        return list(map(self._ref.__getitem__, table)).count(1)

    def fork(self, table: Sequence[int]) -> list[int]:
        """A new table sharing every block (reference counts up)."""
        for block in table:
            self._ref[block] += 1
        return list(table)

    def free(self, table: Sequence[int]) -> None:
        for block in table:
            if self._ref[block] <= 0:
                raise InvalidArgumentError(f"block {block} freed twice")
            self._ref[block] -= 1
            if self._ref[block] == 0:
                # Cached (hashed) blocks go to the back: evicted last.
                if self._hash_of[block] is None:
                    self._free.appendleft(block)
                else:
                    self._free.append(block)

    def check(self, live_tables: Sequence[Sequence[int]]) -> None:
        """Accounting invariant: reference counts equal the live tables' uses."""
        counts = [0] * self.num_blocks
        for table in live_tables:
            for block in table:
                counts[block] += 1
        if counts != self._ref:
            raise AssertionError("block reference counts do not match the live tables")
        if sorted(set(self._free)) != [b for b in range(self.num_blocks) if counts[b] == 0] or len(
            self._free
        ) != len(set(self._free)):
            raise AssertionError("the free list does not hold exactly the unused blocks")
