"""GPU kernels written in Triton (https://triton-lang.org).

* :mod:`toolkit.kernels.runtime`: is Triton installed, compiled or interpreted;
* :mod:`toolkit.kernels.flash_tuned`: FlashAttention forward with causal masking
  and grouped-query attention, :func:`flash_attention_tuned` (strided, tuned);
* :mod:`toolkit.kernels.flash_teaching`: the student-sized version of Assignment 04,
  :func:`flash_attention_triton` with its kernel :func:`flash_attention_kernel`.

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
    "interpreter_active",
    "flash_attention_tuned",
]
