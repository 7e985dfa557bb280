"""The Triton FlashAttention forward kernel, run in Triton's interpreter on CPU.

TRITON_INTERPRET must be in the environment *before* triton is first imported:
Triton picks interpreter or compiler when it decorates a function, its own library
at ``import triton`` and our kernel at the import of ``toolkit.kernels``. So the
variable is set here, above every import. (``setdefault`` keeps an explicit
``TRITON_INTERPRET=0``, for compiled runs on a GPU machine, working.)

In a full test session another test module may already have imported triton
(``transformers`` and ``torch.utils.flop_counter`` do), too early for the variable
to matter. Then the kernel tests cannot run in this process, and
:func:`test_kernel_tests_in_a_fresh_process` runs this file again in a new one.

Shapes stay small (N <= 64, d <= 32) so the interpreter finishes in seconds.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first `import triton`

import math  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from triton_harness import run_file_in_fresh_process  # noqa: E402

from toolkit.flash import flash_attention_forward  # noqa: E402
from toolkit.kernels import flash_tuned  # noqa: E402
from toolkit.kernels.flash_tuned import (  # noqa: E402
    HAS_TRITON,
    flash_attention_tuned,
    interpreter_active,
)

if not HAS_TRITON:
    pytest.skip("triton is not installed", allow_module_level=True)

COMPILED = torch.cuda.is_available() and not any(flash_tuned._mode())
RUNNABLE = interpreter_active() or COMPILED
DEVICE = "cuda" if COMPILED else "cpu"
kernel_test = pytest.mark.skipif(
    not RUNNABLE, reason="triton was imported before TRITON_INTERPRET=1; see the fresh-process test"
)
_CHILD = "TOOLKIT_TRITON_TEST_CHILD"


@pytest.mark.skipif(RUNNABLE or bool(os.environ.get(_CHILD)), reason="kernel tests ran in-process")
def test_kernel_tests_in_a_fresh_process():
    run_file_in_fresh_process(__file__, _CHILD)


@pytest.mark.skipif(not os.environ.get(_CHILD), reason="only in the fresh process")
def test_fresh_process_runs_the_kernel_tests():
    assert RUNNABLE  # otherwise the kernel tests would be skipped there too


def rand(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float32).to(dtype=dtype, device=DEVICE)


def reference(q, k, v, causal=False):
    """float64 attention, KV head h // group, bottom-right causal mask; returns (out, lse)."""
    q, k, v = q.double().cpu(), k.double().cpu(), v.double().cpu()
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        N_q, N_k = s.shape[-2:]
        i = torch.arange(N_q)[:, None] + (N_k - N_q)
        s = s.masked_fill(torch.arange(N_k)[None, :] > i, float("-inf"))
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


def check(q, k, v, causal, atol=1e-5, **blocks):
    out, lse = flash_attention_tuned(q, k, v, causal=causal, **blocks)
    ref_out, ref_lse = reference(q, k, v, causal)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == q.shape[:3] and lse.dtype == torch.float32
    torch.testing.assert_close(out.double().cpu(), ref_out, atol=atol, rtol=atol)
    torch.testing.assert_close(lse.double().cpu(), ref_lse, atol=1e-5, rtol=1e-5)
    return out


def test_host_grid_arithmetic_equals_tritons():
    """The launch grids use plain-Python ``_cdiv`` and ``_next_power_of_2`` (Triton's own
    cost microseconds per call from the host); they must give Triton's numbers."""
    import triton

    from toolkit.kernels.runtime import _cdiv, _next_power_of_2

    for a in range(0, 600):
        for b in (1, 16, 32, 64, 128):
            assert _cdiv(a, b) == triton.cdiv(a, b)
    for n in range(1, 5000):
        assert _next_power_of_2(n) == triton.next_power_of_2(n)


@kernel_test
@pytest.mark.parametrize(
    "B,H,N,d,causal",
    [(1, 2, 16, 16, False), (2, 2, 33, 32, True), (1, 4, 64, 16, True), (2, 2, 33, 16, False)],
)
def test_matches_reference_fp32(B, H, N, d, causal):
    check(rand(B, H, N, d, seed=1), rand(B, H, N, d, seed=2), rand(B, H, N, d, seed=3), causal,
          block_m=16, block_n=16)


@kernel_test
def test_fp16_inputs():
    q, k, v = (rand(1, 2, 33, 32, seed=s, dtype=torch.float16) for s in (1, 2, 3))
    check(q, k, v, causal=True, atol=2e-3, block_m=16, block_n=32)


@kernel_test
def test_gqa_reads_kv_head_by_integer_division_not_modulo():
    # 4 query heads, 2 KV heads: h // 2 = [0, 0, 1, 1] but h % 2 = [0, 1, 0, 1].
    q = rand(1, 4, 16, 16, seed=1)
    k = rand(1, 2, 16, 16, seed=2)
    v = rand(1, 2, 16, 16, seed=3)
    v[:, 1] += 10.0  # make the two KV heads' values impossible to confuse
    out = check(q, k, v, causal=False, block_m=16, block_n=16)
    modulo = reference(q, k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1))[0]  # head h -> h % 2
    assert not torch.allclose(out.double().cpu(), modulo, atol=1e-2)
    assert (out[:, 2:].mean() > 5) and (out[:, :2].mean() < 5)  # heads 2, 3 read KV head 1


@kernel_test
def test_mqa_and_causal_gqa_with_odd_length():
    check(rand(2, 4, 33, 16, seed=4), rand(2, 1, 33, 16, seed=5), rand(2, 1, 33, 16, seed=6),
          causal=True, block_m=16, block_n=16)


@kernel_test
def test_rectangular_causal_and_custom_scale():
    # 16 new queries against 48 cached keys: bottom-right causal, as in decoding
    q, k, v = rand(1, 2, 16, 16, seed=1), rand(1, 2, 48, 16, seed=2), rand(1, 2, 48, 16, seed=3)
    check(q, k, v, causal=True, block_m=16, block_n=16)
    out, _ = flash_attention_tuned(q, k, v, scale=0.1)
    ref = torch.softmax(q.double() @ k.double().transpose(-2, -1) * 0.1, -1) @ v.double()
    torch.testing.assert_close(out.double().cpu(), ref.cpu(), atol=1e-5, rtol=1e-5)
    # 40 queries, 16 keys: the first 24 queries see nothing -> zeros and lse = -inf
    q2 = rand(1, 2, 40, 16, seed=4)
    out2, lse2 = flash_attention_tuned(q2, k[:, :, :16], v[:, :, :16], True, 16, 16)
    ref_out, ref_lse = flash_attention_forward(q2, k[:, :, :16], v[:, :, :16], True, 16, 16)
    torch.testing.assert_close(out2, ref_out, atol=1e-5, rtol=1e-5)
    assert torch.equal(out2[:, :, :24].cpu(), torch.zeros(1, 2, 24, 16))
    assert torch.isneginf(lse2[:, :, :24]).all() and torch.isfinite(lse2[:, :, 24:]).all()


@kernel_test
def test_strided_inputs_and_padded_d_head():
    # (B, N, H, d) memory viewed as (B, H, N, d): works through the strides, no copy
    base = rand(1, 33, 2, 24, seed=7)
    q = base.transpose(1, 2)
    assert not q.is_contiguous()
    check(q, rand(1, 2, 33, 24, seed=8), rand(1, 2, 33, 24, seed=9), causal=True)  # d = 24 -> 32


@kernel_test
def test_bf16_is_refused_in_the_interpreter():
    if not interpreter_active():
        pytest.skip("compiled mode supports bf16")
    q = rand(1, 2, 16, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="bfloat16"):
        flash_attention_tuned(q, q, q)


@kernel_test
def test_bad_arguments():
    q = rand(1, 4, 16, 16)
    with pytest.raises(ValueError, match="block_m"):
        flash_attention_tuned(q, q, q, block_m=24)
    with pytest.raises(ValueError, match="multiple"):
        flash_attention_tuned(q, rand(1, 3, 16, 16), rand(1, 3, 16, 16))
    with pytest.raises(ValueError, match="dtype"):
        flash_attention_tuned(q, q.half(), q)


def test_cpu_without_interpreter_raises_with_instructions(monkeypatch):
    # Simulate a kernel decorated while TRITON_INTERPRET was unset (a compiled JITFunction).
    from triton.runtime.jit import JITFunction

    kernel = flash_tuned._flash_attn_fwd_kernel
    monkeypatch.setattr(flash_tuned, "_flash_attn_fwd_kernel", JITFunction(kernel.fn))
    assert not interpreter_active()
    q = torch.randn(1, 1, 16, 16)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1") as err:
        flash_attention_tuned(q, q, q)
    assert "before" in str(err.value)


def test_mixed_interpreter_state_is_reported(monkeypatch):
    # TRITON_INTERPRET set between `import triton` and the kernel's import.
    monkeypatch.setattr(flash_tuned, "_mode", lambda: (True, False))
    q = torch.randn(1, 1, 16, 16)
    with pytest.raises(RuntimeError, match="changed after triton had been imported"):
        flash_attention_tuned(q, q, q)
