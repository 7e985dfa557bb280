"""GPU kernels written in Triton (https://triton-lang.org).

* :mod:`toolkit.kernels.flash_triton`: FlashAttention forward with causal masking
  and grouped-query attention, :func:`triton_flash_attention` (strided, tuned), and
  the student-sized version of Assignment 04, :func:`flash_attention_triton` with its
  kernel :func:`flash_attention_kernel`.
* :mod:`toolkit.kernels.flash_backward`: the FlashAttention-2 backward,
  :func:`triton_flash_attention_backward` (strided, autotuned on a GPU), launching the
  kernels of :mod:`toolkit.kernels.flash_backward_kernels`.
* :mod:`toolkit.kernels.flash_backward_teaching`: the student-sized backward of
  Assignment 04, :func:`flash_attention_backward_triton` with its kernel.
* :mod:`toolkit.kernels.flash_autograd`: forward and backward as one autograd
  Function, :func:`triton_attention` (differentiable, causal, GQA).

Without a GPU the kernels run in Triton's interpreter, which must be switched on
before ``triton`` is first imported, by anything: Triton decides between interpreter
and compiler when it decorates a function, its own library at ``import triton``,
these kernels at ``import toolkit.kernels``. Some libraries import triton on their
own (``transformers``, ``torch.utils.flop_counter``), so set the variable first::

    import os
    os.environ["TRITON_INTERPRET"] = "1"   # first line of the notebook (restart if late)
    from toolkit.kernels import triton_flash_attention

The interpreter executes each program instance with NumPy: correct for fp32 and
fp16 on small shapes, slow on big ones, and wrong (silently) for bf16 ``tl.dot``,
which the wrapper therefore refuses.
"""

from toolkit.kernels.flash_triton import (
    HAS_TRITON,
    flash_attention_kernel,
    flash_attention_triton,
    interpreter_active,
    triton_flash_attention,
)

# isort: off
# After the forward, which flash_autograd imports from this package.
from toolkit.kernels.flash_backward import triton_flash_attention_backward
from toolkit.kernels.flash_backward_teaching import (
    flash_attention_backward_kernel,
    flash_attention_backward_triton,
)
from toolkit.kernels.flash_autograd import TritonFlashAttention, triton_attention
# isort: on

__all__ = [
    "HAS_TRITON",
    "TritonFlashAttention",
    "flash_attention_backward_kernel",
    "flash_attention_backward_triton",
    "flash_attention_kernel",
    "flash_attention_triton",
    "interpreter_active",
    "triton_attention",
    "triton_flash_attention",
    "triton_flash_attention_backward",
]
