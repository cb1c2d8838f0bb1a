"""Bad input gets a typed error that names the argument; NaN propagates deterministically."""

import pytest
import torch

from reasonserve import ops
from reasonserve.core import InvalidArgumentError, InvalidTypeError

X = torch.randn(4, 8)
W = torch.randn(5, 8)
LOGITS = torch.randn(3, 10)
Q = torch.randn(1, 2, 3, 4)
KV = torch.randn(1, 1, 5, 4)

CASES = [
    ("wrong rank weight", lambda: ops.linear(X, torch.randn(5, 8, 1)), InvalidArgumentError, "weight"),
    ("mismatched K", lambda: ops.linear(X, torch.randn(5, 9)), InvalidArgumentError, "mismatched K"),
    ("bias shape", lambda: ops.linear(X, W, torch.randn(4)), InvalidArgumentError, "bias"),
    ("int dtype", lambda: ops.linear(X.long(), W), InvalidTypeError, "x must have a floating dtype"),
    ("mixed dtypes", lambda: ops.linear(X, W.double()), InvalidTypeError, "weight has dtype"),
    ("not a tensor", lambda: ops.matmul([[1.0]], W), InvalidTypeError, "a must be a torch.Tensor"),
    ("matmul rank", lambda: ops.matmul(torch.randn(3), W), InvalidArgumentError, "at least 2"),
    ("bmm broadcast", lambda: ops.matmul(torch.randn(2, 3, 4), torch.randn(3, 4, 5)), InvalidArgumentError, "broadcast"),
    ("rms weight", lambda: ops.rms_norm(X, torch.randn(7)), InvalidArgumentError, "weight must have shape"),
    ("rms eps", lambda: ops.rms_norm(X, torch.randn(8), eps=float("nan")), InvalidArgumentError, "eps"),
    ("softmax dim", lambda: ops.softmax(X, dim=2), InvalidArgumentError, "dim=2"),
    ("mean repeated dim", lambda: ops.mean(X, (0, -2)), InvalidArgumentError, "repeated"),
    ("bad impl", lambda: ops.softmax(X, impl="cuda"), InvalidArgumentError, "impl"),
    ("attn heads", lambda: ops.attention(torch.randn(1, 3, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)), InvalidArgumentError, "multiple"),
    ("attn head dim", lambda: ops.attention(Q, torch.randn(1, 1, 5, 3), torch.randn(1, 1, 5, 3)), InvalidArgumentError, "D=4"),
    ("attn k/v shapes", lambda: ops.attention(Q, KV, torch.randn(1, 1, 6, 4)), InvalidArgumentError, "one shape"),
    ("attn short causal", lambda: ops.attention(Q, KV[:, :, :2], KV[:, :, :2]), InvalidArgumentError, "at least S=3"),
    ("attn kv_lens range", lambda: ops.attention(Q, KV, KV, kv_lens=torch.tensor([9])), InvalidArgumentError, "kv_lens"),
    ("attn kv_lens dtype", lambda: ops.attention(Q, KV, KV, kv_lens=torch.tensor([5.0])), InvalidTypeError, "kv_lens"),
    ("attn scale", lambda: ops.attention(Q, KV, KV, scale=float("inf")), InvalidArgumentError, "scale"),
    ("decode zero length", lambda: ops.decode_attention(torch.randn(1, 2, 4), KV, KV, torch.tensor([0])), InvalidArgumentError, "kv_lens"),
    ("temperature nan", lambda: ops.sample(LOGITS, seeds=1, positions=0, temperature=float("nan")), InvalidArgumentError, "temperature"),
    ("temperature inf", lambda: ops.sample(LOGITS, seeds=1, positions=0, temperature=float("inf")), InvalidArgumentError, "temperature"),
    ("temperature < 0", lambda: ops.sample(LOGITS, seeds=1, positions=0, temperature=-1.0), InvalidArgumentError, "temperature"),
    ("top_p zero", lambda: ops.sample(LOGITS, seeds=1, positions=0, top_p=0.0), InvalidArgumentError, "top_p"),
    ("top_p > 1", lambda: ops.sample(LOGITS, seeds=1, positions=0, top_p=1.5), InvalidArgumentError, "top_p"),
    ("top_k < 0", lambda: ops.sample(LOGITS, seeds=1, positions=0, top_k=-1), InvalidArgumentError, "top_k"),
    ("min_p > 1", lambda: ops.sample(LOGITS, seeds=1, positions=0, min_p=2.0), InvalidArgumentError, "min_p"),
    ("per-row shape", lambda: ops.sample(LOGITS, seeds=1, positions=0, temperature=[1.0, 1.0]), InvalidArgumentError, "temperature"),
    ("all -inf row", lambda: ops.sample(torch.full((2, 5), float("-inf")), seeds=1, positions=0), InvalidArgumentError, "all -inf"),
    ("seed too big", lambda: ops.sample(LOGITS, seeds=2**64, positions=0), InvalidArgumentError, "seeds"),
    ("seed negative", lambda: ops.sample(LOGITS, seeds=-1, positions=0), InvalidArgumentError, "seeds"),
    ("seed float", lambda: ops.sample(LOGITS, seeds=[1.5, 2, 3], positions=0), InvalidTypeError, "seeds"),
    ("seed string", lambda: ops.sample(LOGITS, seeds="7", positions=0), InvalidTypeError, "seeds"),
    ("seed float scalar", lambda: ops.sample(LOGITS, seeds=1.5, positions=0), InvalidTypeError, "seeds"),
    ("seed count", lambda: ops.sample(LOGITS, seeds=[1, 2], positions=0), InvalidArgumentError, "seeds"),
    ("position too big", lambda: ops.sample(LOGITS, seeds=1, positions=2**32), InvalidArgumentError, "positions"),
    ("position tensor negative", lambda: ops.sample(LOGITS, seeds=1, positions=torch.tensor([-1, 0, 0])), InvalidArgumentError, "positions"),
    ("logits rank", lambda: ops.sample(torch.randn(10), seeds=1, positions=0), InvalidArgumentError, "logits"),
    ("empty vocab", lambda: ops.sample(torch.randn(2, 0), seeds=1, positions=0), InvalidArgumentError, "vocabulary"),
]


@pytest.mark.parametrize(("what", "call", "error", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_a_typed_error_naming_the_argument(what, call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_errors_are_also_builtin_value_and_type_errors():
    with pytest.raises(ValueError):
        ops.linear(X, torch.randn(5, 9))
    with pytest.raises(TypeError):
        ops.linear(X.long(), W)


def test_explicit_triton_without_a_runnable_backend_raises(monkeypatch):
    from reasonserve.core import ImplementationUnavailableError

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ImplementationUnavailableError, match="triton"):
        ops.softmax(X, impl="triton")
    with pytest.raises(ImplementationUnavailableError, match="float64"):
        ops.softmax(X.double().cuda() if torch.cuda.is_available() else X.double(), impl="triton")


@pytest.mark.parametrize(
    "op",
    [
        lambda x: ops.linear(x, W),
        lambda x: ops.rms_norm(x, torch.ones(8)),
        lambda x: ops.softmax(x),
        lambda x: ops.log_softmax(x),
        lambda x: ops.mean(x, -1),
        ops.silu,
    ],
)
def test_nan_propagates_the_same_alone_and_batched(op):
    x = torch.randn(6, 8)
    x[2, 5] = float("nan")
    batched = op(x)
    alone = op(x[2:3])
    assert torch.equal(torch.isnan(batched[2:3]), torch.isnan(alone))
    assert torch.isnan(alone).any()
    assert not torch.isnan(batched[[0, 1, 3, 4, 5]]).any()  # no leak into other rows


_KC = torch.randn(10, 2, 4, 8)
_TABLES = torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int32)


@pytest.mark.parametrize("impl", ["auto", "torch"])
@pytest.mark.parametrize(
    ("tables", "seq_lens", "query_lens", "match"),
    [
        (torch.tensor([[0, 1, 2], [3, 4, 99]]), [5, 9], [1, 2], "block_tables entries"),
        (torch.tensor([[0, 1, 2], [3, 4, -1]]), [5, 9], [1, 2], "block_tables entries"),
        (_TABLES, [5, 9], [2, 2], "sum\\(query_lens\\)"),
        (_TABLES, [0, 9], [1, 2], "sequence 0"),
        (_TABLES, [5, 13], [1, 2], "sequence 1"),
        (_TABLES, [5, 9], [-1, 4], "sequence 0"),
        (_TABLES.float(), [5, 9], [1, 2], "int32/int64"),
    ],
)
def test_paged_attention_rejects_bad_tables_and_lengths(impl, tables, seq_lens, query_lens, match):
    q = torch.randn(3, 4, 8)
    with pytest.raises((InvalidArgumentError, InvalidTypeError), match=match):
        ops.paged_attention(q, _KC, _KC, tables, torch.tensor(seq_lens), torch.tensor(query_lens), impl=impl)


def test_paged_attention_ignores_table_entries_past_a_sequence():
    q = torch.randn(2, 4, 8)
    junk = torch.tensor([[0, 1, 77], [3, -5, 1000]])  # entries never read: seq lens 5 and 3
    good = torch.tensor([[0, 1, 0], [3, 0, 0]])
    lens, qlens = torch.tensor([5, 3]), torch.tensor([1, 1])
    assert torch.equal(ops.paged_attention(q, _KC, _KC, junk, lens, qlens),
                       ops.paged_attention(q, _KC, _KC, good, lens, qlens))  # fmt: skip
