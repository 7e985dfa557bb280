"""State-space models: a recurrence that trains like a convolution (S4) or a scan (Mamba).

A (linear, time-invariant) state-space model maps an input signal ``u(t)`` to an output
``y(t)`` through an ``N``-dimensional state ``h(t)``:

    h'(t) = A h(t) + B u(t),        y(t) = C h(t) + D u(t).

To run it on token sequences it is *discretised* with a step ``delta`` (zero-order
hold), which turns it into a linear recurrence ``h_t = A_bar h_{t-1} + B_bar u_t`` that
needs constant memory per generated token, like an RNN, but can be computed for a
whole sequence at once, either as a convolution with a kernel ``K`` (when the
parameters do not depend on the input: S4, arXiv 2111.00396; S4D, arXiv 2206.11893) or
as a parallel scan (when they do: Mamba, arXiv 2312.00752).

* :mod:`toolkit.ssm.lti`: zero-order hold, the recurrent form, the kernel ``K`` and the
  convolutional form (equal to the recurrent one).
* :mod:`toolkit.ssm.selective`: Mamba's selective scan, sequential and parallel
  (associative scan), and the one-token step used for generation.
* :mod:`toolkit.ssm.duality`: Mamba-2's state-space duality: with one scalar decay per
  head the scan equals a masked attention ``(L o C B^T) x`` with a 1-semiseparable mask,
  and the chunked form (quadratic inside chunks, recurrent between them) equals both.
* :mod:`toolkit.ssm.mamba`: the Mamba block (``MambaMixer``), parameter for parameter
  the computation of Hugging Face's ``MambaMixer``, with a constant-size cache.

Layout: sequences are ``(batch, seq, channels)``; an SSM with ``H`` channels (one
independent SSM per channel, as in S4D and Mamba) and state size ``N`` has a diagonal
``A`` stored as ``(H, N)``.
"""

from toolkit.ssm.duality import (
    semiseparable_mask,
    ssd_attention,
    ssd_chunked,
    ssd_recurrent,
)
from toolkit.ssm.lti import (
    broadcast_delta,
    discretize_simplified,
    discretize_zoh,
    discretize_zoh_matrix,
    ssm_convolutional,
    ssm_kernel,
    ssm_recurrent,
)
from toolkit.ssm.mamba import MambaCache, MambaMixer
from toolkit.ssm.selective import (
    associative_scan,
    selective_scan,
    selective_scan_parallel,
    selective_step,
)

__all__ = [
    "MambaCache",
    "MambaMixer",
    "associative_scan",
    "broadcast_delta",
    "discretize_simplified",
    "discretize_zoh",
    "discretize_zoh_matrix",
    "selective_scan",
    "selective_scan_parallel",
    "selective_step",
    "semiseparable_mask",
    "ssd_attention",
    "ssd_chunked",
    "ssd_recurrent",
    "ssm_convolutional",
    "ssm_kernel",
    "ssm_recurrent",
]
