"""The teaching Triton kernel of Assignment 04 (`flash_attention_kernel`), in the interpreter.

Same set-up as ``test_triton_kernel.py``: TRITON_INTERPRET is set above every import,
and if triton was imported earlier in the session (too early for the variable to
matter), :func:`test_kernel_tests_in_a_fresh_process` runs this file in a new process.
Shapes stay tiny (N <= 48, d <= 32) so the interpreter finishes in seconds.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first `import triton`

import math  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from triton_harness import run_file_in_fresh_process, run_without_triton  # noqa: E402

from toolkit.flash import flash_attention_forward  # noqa: E402
from toolkit.kernels import runtime  # noqa: E402
from toolkit.kernels.flash_teaching import (  # noqa: E402
    check_kernel_launch,
    flash_attention_kernel,
    flash_attention_triton,
)
from toolkit.kernels.runtime import HAS_TRITON  # noqa: E402


def test_imports_and_refuses_to_run_without_triton():
    # A process in which `import triton` fails: the module (and its top-level
    # @triton.jit kernel) must still import, and launching must say what is missing.
    printed = run_without_triton("""
        import torch
        from toolkit.kernels import flash_teaching as ft
        assert not ft.HAS_TRITON
        q = torch.zeros(1, 1, 16, 16)
        try:
            ft.flash_attention_triton(q, q, q)
        except RuntimeError as exc:
            assert "not installed" in str(exc), exc
            print("ok")
    """)
    assert printed.strip() == "ok"


if not HAS_TRITON:
    pytest.skip("triton is not installed", allow_module_level=True)

INTERPRETED = runtime._interpreted(flash_attention_kernel) and runtime._interpreted(
    runtime.tl.max
)
COMPILED = torch.cuda.is_available() and not runtime._interpreted(flash_attention_kernel)
RUNNABLE = INTERPRETED or COMPILED
DEVICE = "cuda" if COMPILED else "cpu"
kernel_test = pytest.mark.skipif(
    not RUNNABLE, reason="triton was imported before TRITON_INTERPRET=1; see the fresh-process test"
)
_CHILD = "TOOLKIT_TRITON_TEACHING_TEST_CHILD"


@pytest.mark.skipif(RUNNABLE or bool(os.environ.get(_CHILD)), reason="kernel tests ran in-process")
def test_kernel_tests_in_a_fresh_process():
    run_file_in_fresh_process(__file__, _CHILD)


def rand(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float32).to(dtype=dtype, device=DEVICE)


def reference(q, k, v, causal=False, scale=None):
    """float64 attention, KV head h // group, bottom-right causal mask; returns (out, lse)."""
    q, k, v = q.double().cpu(), k.double().cpu(), v.double().cpu()
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.transpose(-2, -1) * scale
    if causal:
        N_q, N_k = s.shape[-2:]
        i = torch.arange(N_q)[:, None] + (N_k - N_q)
        s = s.masked_fill(torch.arange(N_k)[None, :] > i, float("-inf"))
    w = torch.softmax(s, -1).nan_to_num(0.0)  # rows with no visible key: zeros
    return w @ v, torch.logsumexp(s, -1)


def check(q, k, v, causal, atol=1e-5, **kwargs):
    out, lse = flash_attention_triton(q, k, v, causal, **kwargs)
    ref_out, ref_lse = reference(q, k, v, causal, kwargs.get("scale"))
    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == q.shape[:3] and lse.dtype == torch.float32
    torch.testing.assert_close(out.double().cpu(), ref_out, atol=atol, rtol=atol)
    torch.testing.assert_close(lse.double().cpu(), ref_lse, atol=1e-5, rtol=1e-5)
    return out, lse


@kernel_test
@pytest.mark.parametrize(
    "B,H,H_kv,N_q,N_k,d,causal",
    [
        (1, 2, 2, 16, 16, 16, False),
        (2, 4, 2, 33, 33, 16, True),  # GQA, odd length, tiles sticking out
        (1, 4, 1, 20, 20, 32, True),  # MQA
        (1, 2, 2, 16, 48, 16, True),  # decoding-style: 16 new queries after 32 cached keys
    ],
)
def test_matches_reference_fp32(B, H, H_kv, N_q, N_k, d, causal):
    check(rand(B, H, N_q, d, seed=1), rand(B, H_kv, N_k, d, seed=2), rand(B, H_kv, N_k, d, seed=3),
          causal, block_m=16, block_n=16)


@kernel_test
def test_agrees_with_the_pytorch_tiled_forward_and_custom_scale():
    q, k, v = rand(1, 4, 24, 16, seed=4), rand(1, 2, 24, 16, seed=5), rand(1, 2, 24, 16, seed=6)
    out, lse = check(q, k, v, True, block_m=16, block_n=32, scale=0.3)
    ref_out, ref_lse = flash_attention_forward(q.cpu(), k.cpu(), v.cpu(), True, 8, 8, scale=0.3)
    torch.testing.assert_close(out.cpu(), ref_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse.cpu(), ref_lse, atol=1e-5, rtol=1e-5)


@kernel_test
def test_rows_with_no_visible_key_are_zero_with_lse_minus_inf():
    # 40 queries, 16 keys, bottom-right causal: the first 24 queries see nothing.
    q, k, v = rand(1, 2, 40, 16, seed=7), rand(1, 2, 16, 16, seed=8), rand(1, 2, 16, 16, seed=9)
    out, lse = check(q, k, v, True, block_m=16, block_n=16)
    assert torch.equal(out[:, :, :24].cpu(), torch.zeros(1, 2, 24, 16))
    assert torch.isneginf(lse[:, :, :24]).all() and torch.isfinite(lse[:, :, 24:]).all()


@kernel_test
def test_fp16_and_non_contiguous_inputs():
    q, k, v = (rand(1, 2, 24, 32, seed=s, dtype=torch.float16) for s in (1, 2, 3))
    check(q, k, v, True, atol=2e-3, block_m=16, block_n=16)
    base = rand(1, 24, 2, 16, seed=10)  # (B, N, H, d) memory viewed as (B, H, N, d)
    q = base.transpose(1, 2)
    assert not q.is_contiguous()
    check(q, rand(1, 2, 24, 16, seed=11), rand(1, 2, 24, 16, seed=12), False)


@kernel_test
def test_gqa_reads_kv_head_by_integer_division_not_modulo():
    q, k, v = rand(1, 4, 16, 16, seed=1), rand(1, 2, 16, 16, seed=2), rand(1, 2, 16, 16, seed=3)
    v[:, 1] += 10.0  # KV head 1's values are unmistakable
    out, _ = check(q, k, v, False, block_m=16, block_n=16)
    assert out[:, :2].mean() < 5 < out[:, 2:].mean()  # query heads 2, 3 read KV head 1


@kernel_test
def test_bad_arguments_are_named():
    q = rand(1, 4, 16, 16)
    with pytest.raises(ValueError, match="block_m"):
        flash_attention_triton(q, q, q, block_m=24)
    with pytest.raises(ValueError, match="block_n"):
        flash_attention_triton(q, q, q, block_n=8)
    with pytest.raises(ValueError, match="multiple"):
        flash_attention_triton(q, rand(1, 3, 16, 16), rand(1, 3, 16, 16))
    with pytest.raises(ValueError, match="power of two"):
        x = rand(1, 2, 16, 24)
        flash_attention_triton(x, x, x)
    with pytest.raises(ValueError, match="dtype"):
        flash_attention_triton(q, q.half(), q.half())
    with pytest.raises(ValueError, match="empty"):
        flash_attention_triton(q[:, :, :0], q, q)
    with pytest.raises(ValueError, match="4-d"):
        flash_attention_triton(q[0], q, q)


@kernel_test
def test_bf16_is_refused_in_the_interpreter():
    if not INTERPRETED:
        pytest.skip("compiled mode supports bf16")
    q = rand(1, 2, 16, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="bfloat16"):
        flash_attention_triton(q, q, q)


def test_cpu_without_interpreter_raises_with_instructions():
    # A kernel decorated while TRITON_INTERPRET was unset (a compiled JITFunction).
    from triton.runtime.jit import JITFunction

    kernel = getattr(flash_attention_kernel, "fn", flash_attention_kernel)
    q = torch.randn(1, 1, 16, 16)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET") as err:
        check_kernel_launch(JITFunction(kernel), q, q, q, 16, 16)
    if runtime._interpreted(runtime.tl.max):
        assert "changed after triton had been imported" in str(err.value)
    else:
        assert "interpreter is off" in str(err.value)
