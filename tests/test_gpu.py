"""CUDA checks at real sizes (7B-class shapes). Marked ``gpu``: skipped without CUDA."""

import pytest
import torch
import torch.nn.functional as F

import reasonserve
from _compare import assert_bitwise_equal, assert_close
from reasonserve import ops

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_triton_linear_rows_are_invariant_at_7b_shapes(dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(1024, 4096, device="cuda", generator=g).to(dtype)
    w = (torch.randn(4096, 4096, device="cuda", generator=g) / 64).to(dtype)
    full = ops.linear(x, w, impl="triton")
    for m in (1, 7, 64, 255, 256, 1000):
        assert_bitwise_equal(ops.linear(x[:m], w, impl="triton"), full[:m], f"M={m}")
    perm = torch.randperm(1024, device="cuda", generator=g)
    assert_bitwise_equal(ops.linear(x[perm], w, impl="triton"), full[perm], "permutation")
    ref = F.linear(x.double(), w.double())
    tol = {torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 1e-1}[dtype]
    assert_close(full, ref, tol, tol, "vs float64")


def test_row_kernels_and_attention_invariant_on_gpu():
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(300, 4096, device="cuda", generator=g, dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", generator=g, dtype=torch.bfloat16)
    for fn in (lambda t: ops.rms_norm(t, w), ops.softmax, ops.log_softmax, lambda t: ops.mean(t, -1)):
        assert_bitwise_equal(fn(x)[5:6], fn(x[5:6]))
    lens = torch.tensor([4000, 17, 2500], device="cuda")
    q = torch.randn(3, 32, 128, device="cuda", generator=g, dtype=torch.bfloat16)
    k = torch.randn(3, 8, 4096, 128, device="cuda", generator=g, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    full = ops.decode_attention(q, k, v, lens)
    alone = ops.decode_attention(q[1:2], k[1:2, :, :17], v[1:2, :, :17], lens[1:2])
    assert_bitwise_equal(full[1:2], alone, "decode attention")


def test_deterministic_mode_on_cuda_tensors():
    x = torch.randn(77, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) / 64
    with reasonserve.deterministic_mode():
        assert_bitwise_equal(F.linear(x, w)[9:10], F.linear(x[9:10], w))


def test_cuda_sampling_picks_the_cpu_tokens():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(64, 32000, generator=g) * 3
    seeds, positions = list(range(10**12, 10**12 + 64)), torch.arange(64) * 977
    for kwargs in ({}, {"top_k": 50}, {"top_p": 0.9, "temperature": 0.7}, {"min_p": 0.05}):
        cpu = ops.sample(logits, seeds=seeds, positions=positions, **kwargs)
        gpu = ops.sample(logits.cuda(), seeds=seeds, positions=positions.cuda(), **kwargs)
        assert torch.equal(gpu.cpu(), cpu), kwargs
    noise_cpu = ops.gumbel_noise(seeds, positions, 32000)
    noise_gpu = ops.gumbel_noise(seeds, positions.cuda(), 32000, device="cuda").cpu()
    assert_close(noise_gpu, noise_cpu, 1e-12, 1e-12, "noise cpu vs cuda")


def test_decode_attention_reads_batch_entries_past_int32_offsets():
    """A padded cache of 3 x 2**30 elements (6 GiB, bf16): entry 2 starts 2**31 elements in,
    where an int32 ``b * stride`` wraps negative. Its row must equal the row computed from a
    view that starts at that entry. (Last in the file: a wrapped offset may fault and
    poison the CUDA context for the tests after it.)"""
    b, hkv, t, d, n = 3, 8, 1 << 20, 128, 37
    g = torch.Generator(device="cuda").manual_seed(4)
    cache = torch.empty(b, hkv, t, d, device="cuda", dtype=torch.bfloat16)
    cache[:, :, :n] = torch.randn(b, hkv, n, d, device="cuda", generator=g).to(torch.bfloat16)
    q = torch.randn(b, 32, d, device="cuda", generator=g, dtype=torch.bfloat16)
    lens = torch.full((b,), n, device="cuda")
    full = ops.decode_attention(q, cache, cache, lens)
    torch.cuda.synchronize()  # a wrapped offset would fault here
    alone = ops.decode_attention(q[2:], cache[2:, :, :n], cache[2:, :, :n], lens[2:])
    assert_bitwise_equal(full[2:], alone, "the entry past 2**31 elements")
    ref = ops.decode_attention(q[2:].double(), cache[2:, :, :n].double(), cache[2:, :, :n].double(), lens[2:],
                               impl="torch")  # fmt: skip
    assert_close(full[2:].double(), ref, 2e-2, 2e-2, "vs float64")
