"""Counting attention's cost: FLOPs, modelled memory, and measured peak memory.

The forward does two matrix products per (query, key) pair, ``Q K^T`` and ``P V``,
each ``2 N^2 d`` FLOPs per head: ``4 B H N^2 d`` in all, half of it with a causal mask
(tiles above the diagonal are skipped).
"""

from __future__ import annotations

import weakref

from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def attention_forward_flops(B: int, H: int, N: int, d: int, causal: bool = False) -> int:
    """Forward FLOPs of attention: ``4 B H N^2 d``, halved with a causal mask.

    Two matrix products per head, ``Q K^T`` (``N x d`` by ``d x N``) and ``P V``
    (``N x N`` by ``N x d``), each ``N^2 d`` multiply-adds = ``2 N^2 d`` FLOPs. The
    softmax's ``O(N^2)`` is ignored, as is customary. The causal count is the
    conventional half (exactly: ``N (N + 1) / 2`` visible pairs).
    """
    for name, value in (("B", B), ("H", H), ("N", N), ("d", d)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    flops = 4 * B * H * N * N * d  # 2 matmuls x 2 FLOPs per multiply-add
    return flops // 2 if causal else flops


def attention_memory_bytes(
    N: int,
    d: int,
    *,
    batch: int = 1,
    heads: int = 1,
    tiled: bool = False,
    block_q: int = 128,
    block_k: int = 128,
    bytes_per_element: float = 2,
) -> float:
    """Extra memory of the forward beyond inputs and output (a model, not a measurement).

    * naive: the ``N x N`` score matrix per head, ``B H N^2 x bytes_per_element`` (4096
      tokens in fp16: 33.5 MB per head); the probabilities need as much again unless
      computed in place.
    * tiled: one score tile ``block_q x block_k``, the accumulator ``block_q x d`` and
      ``m, l`` in fp32, plus the saved logsumexp, ``N`` fp32 values per head: O(N).
    """
    if N < 0 or d < 0:
        raise ValueError(f"N and d must be >= 0, got {N}, {d}")
    if not tiled:
        return batch * heads * N * N * bytes_per_element
    bq, bk = min(block_q, N), min(block_k, N)
    per_head = bq * bk * bytes_per_element + bq * d * 4 + 2 * bq * 4 + N * 4
    return batch * heads * per_head


class PeakMemoryCounter(TorchDispatchMode):
    """Count the bytes of tensors created inside the ``with`` block; track the peak.

    Every operator's fresh output storage is added to ``live`` when it is created and
    subtracted when Python frees it, so ``peak`` is the largest amount of memory
    the computation held at once *on top of* what existed before (inputs). Views
    share storage and are not counted twice. Works on any device, CPU included,
    where ``torch.cuda.max_memory_allocated`` does not exist.

    ``shapes`` keeps every output shape, so a test can assert that no ``N x N``
    tensor was ever produced.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self.shapes: list[tuple[int, ...]] = []
        self._tracked: set[int] = set()

    def _release(self, key: int, nbytes: int) -> None:
        self._tracked.discard(key)
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        # Views and in-place results reuse an input's storage: not a new allocation.
        inputs = {
            a.untyped_storage().data_ptr()
            for a in tree_flatten((args, kwargs))[0]
            if isinstance(a, Tensor)
        }
        for t in tree_flatten(result)[0]:
            if not isinstance(t, Tensor):
                continue
            self.shapes.append(tuple(t.shape))
            storage = t.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
            if nbytes == 0 or key in self._tracked or key in inputs:
                continue
            self._tracked.add(key)
            self.live += nbytes
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._release, key, nbytes).atexit = False
        return result
