"""Triton at run time: is it installed, and are the kernels compiled or interpreted?

Triton is Linux-only, and the rest of the toolkit must import without it: then
``HAS_TRITON`` is False, ``tl`` is None and ``triton`` is a stand-in whose ``jit`` leaves
a function as it is, so kernels can still be *defined* (never run).

Without a GPU the kernels run in Triton's interpreter, switched on by
``TRITON_INTERPRET=1`` *before* ``triton`` is first imported. The interpreter supports
fp32 and fp16 here; its bf16 ``tl.dot`` returns wrong numbers without any error, so
bf16 is refused in interpreter mode.
"""

from __future__ import annotations

import torch
from torch import Tensor

try:  # Triton is Linux-only; the rest of the toolkit must import without it.
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover - depends on the platform
    triton = None
    tl = None
    HAS_TRITON = False

LOG2E = 1.4426950408889634  # log2(e)


if not HAS_TRITON:  # pragma: no cover - depends on the platform

    class _TritonMissing:
        """Stands in for ``triton`` without Triton: kernels can be *defined*, never run
        (:func:`check_kernel_launch` raises first)."""

        @staticmethod
        def jit(fn):
            return fn

    triton = _TritonMissing()


def _interpreted(fn) -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(fn, InterpretedFunction)


_ENABLE_HINT = (
    "Triton kernels need a CUDA GPU, or Triton's interpreter on CPU. To use the "
    "interpreter, set the environment variable TRITON_INTERPRET=1 *before* triton is "
    "first imported (by anything): run `TRITON_INTERPRET=1 python ...`, or put "
    "`import os; os.environ['TRITON_INTERPRET'] = '1'` in the first cell of the notebook "
    "and restart the kernel."
)


def _cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for ``b > 0``, in plain Python, for launch grids.

    Equal to ``triton.cdiv``, which is a ``@triton.constexpr_function``: called from
    Python it goes through Triton's wrapper and costs microseconds, on every launch.
    """
    return -(-a // b)


def _next_power_of_2(n: int) -> int:
    """The smallest power of two ``>= n`` for ``n >= 1`` (``triton.next_power_of_2``'s
    value, without its wrapper's cost; see :func:`_cdiv`)."""
    return 1 << (n - 1).bit_length()


def _is_pow2(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0


def _check_dtype(q: Tensor, interpreting: bool) -> None:
    """fp16/fp32 everywhere, bf16 only compiled: the interpreter gets bf16 ``tl.dot`` wrong."""
    allowed = (torch.float16, torch.float32) + (() if interpreting else (torch.bfloat16,))
    if q.dtype not in allowed:
        if q.dtype == torch.bfloat16:
            raise ValueError(
                "q, k, v are bfloat16, which the Triton interpreter (TRITON_INTERPRET=1) "
                "computes wrongly in tl.dot without any error; use float16 or float32 on CPU."
            )
        raise ValueError(f"q, k, v dtype must be one of {allowed}, got {q.dtype}")
