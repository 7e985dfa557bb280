"""GPU kernels written in Triton (https://triton-lang.org).

* :mod:`toolkit.kernels.runtime`: is Triton installed, compiled or interpreted;
* :mod:`toolkit.kernels.flash_tuned`: :func:`flash_attention_tuned`, the FlashAttention
  forward to use (causal masking, grouped-query attention): any strided layout, any
  head size (padded to a power of two), tile sizes and launch settings chosen per device;
* :mod:`toolkit.kernels.flash_teaching`: :func:`flash_attention_triton` and its kernel
  :func:`flash_attention_kernel`, the version Assignment 04 asks students to write: the
  same algorithm for contiguous inputs and a power-of-two head size, every argument
  check in :func:`check_kernel_launch`.

Without a GPU the kernels run in Triton's interpreter, which must be switched on
before ``triton`` is first imported, by anything: Triton decides between interpreter
and compiler when it decorates a function, its own library at ``import triton``,
these kernels at ``import toolkit.kernels``. Some libraries import triton on their
own (``transformers``, ``torch.utils.flop_counter``), so set the variable first::

    import os
    os.environ["TRITON_INTERPRET"] = "1"   # first line of the notebook (restart if late)
    from toolkit.kernels import flash_attention_tuned

The interpreter executes each program instance with NumPy: correct for fp32 and
fp16 on small shapes, slow on big ones, and wrong (silently) for bf16 ``tl.dot``,
which the wrapper therefore refuses.
"""

from toolkit.kernels.flash_teaching import (
    check_kernel_launch,
    flash_attention_kernel,
    flash_attention_triton,
)
from toolkit.kernels.flash_tuned import flash_attention_tuned, interpreter_active
from toolkit.kernels.runtime import HAS_TRITON

__all__ = [
    "HAS_TRITON",
    "check_kernel_launch",
    "flash_attention_kernel",
    "flash_attention_triton",
    "flash_attention_tuned",
    "interpreter_active",
]
