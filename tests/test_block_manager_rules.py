"""The paged KV block manager's rules, worked by hand with blocks of 4 tokens: prefix
reuse stops before the block holding a prompt's last token, only fully computed blocks
are registered, a namespace (salt) never shares with another, a write into a shared block
copies it first, and a shared block is released only with its last holder."""

from reasonserve.engine.block_manager import BlockManager

BS = 4
NINE = list(range(1, 10))  # 9 tokens: blocks [1-4] [5-8] [9]


def _registered(tokens, computed, salt=None):
    bm = BlockManager(16, BS)
    table, _ = bm.allocate_prompt(tokens, salt)
    bm.register_full_blocks(table, tokens, computed, salt)
    bm.free(table)
    return bm


def test_prefix_reuse_leaves_the_block_of_the_last_token_to_compute():
    bm = _registered(NINE, 9)
    assert bm.allocate_prompt(NINE)[1] == 8  # two full blocks reused, the last token's block not
    assert bm.allocate_prompt(NINE[:8])[1] == 4  # 8 tokens: the second block holds the last token
    assert bm.allocate_prompt(NINE[:4])[1] == 0


def test_only_fully_computed_blocks_are_registered():
    assert _registered(NINE, 6).allocate_prompt(NINE)[1] == 4  # block [5-8] had 2 of 4 computed
    assert _registered(NINE, 8).allocate_prompt(NINE)[1] == 8


def test_a_salt_keeps_its_own_namespace():
    bm = _registered(NINE, 9, salt=None)
    assert bm.allocate_prompt(NINE, "stock")[1] == 0
    assert bm.allocate_prompt(NINE, None)[1] == 8
    other = [0, 0, 0, 0, *NINE[4:]]  # the same second block after another first block
    assert bm.allocate_prompt(other)[1] == 0


def test_writing_into_a_shared_block_copies_it_first():
    bm = BlockManager(8, BS)
    table = bm.allocate(2)
    forked = bm.fork(table)
    assert bm.ensure_capacity(forked, 5) == [(table[1], forked[1])]  # position 4 is in block 1, shared
    assert forked[0] == table[0] and forked[1] != table[1]
    assert bm.ensure_capacity(table, 8) == []  # block 1 is table's alone now
    assert bm.ensure_capacity(table, 9) == [] and len(table) == 3  # a fresh block for position 8
    bm.check([table, forked])


def test_a_shared_block_is_released_only_with_its_last_holder():
    bm = BlockManager(8, BS)
    table = bm.allocate(2)
    forked = bm.fork(table)
    assert bm.released_by([table]) == 0
    assert bm.released_by([table, forked]) == 2
    assert bm.exclusive(table) == 0
    bm.ensure_capacity(forked, 5)  # copy-on-write: block 1 becomes each table's own
    assert bm.exclusive(table) == 1 and bm.released_by([table]) == 1


def test_a_write_at_the_end_of_a_shared_full_block_copies_it():
    bm = BlockManager(8, BS)
    table = bm.allocate(2)
    forked = bm.fork(table)
    assert bm.ensure_capacity(forked, 8) == [(table[1], forked[1])]  # position 7: the last of block 1


def test_a_prompt_may_take_exactly_the_free_blocks():
    bm = BlockManager(3, BS)
    table, cached = bm.allocate_prompt(NINE)
    assert (len(table), cached, bm.num_free) == (3, 0, 0)


def test_an_evicted_prefix_block_is_no_longer_found():
    small = BlockManager(3, BS)
    table, _ = small.allocate_prompt(NINE)
    small.register_full_blocks(table, NINE, 9)
    small.free(table)
    taken = small.allocate(3)  # every block, the cached two included, now holds other tokens
    small.free(taken)
    assert small.allocate_prompt(NINE)[1] == 0
