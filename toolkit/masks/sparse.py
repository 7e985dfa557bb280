"""Sparse attention patterns: fewer cells than the dense ``T x T``.

Dense attention lets every query see every key: T^2 cells. Sparse patterns keep
only some cells so the cost grows like T * (keys per query) instead of T^2.

* sliding window (Longformer arXiv 2004.05150, Mistral arXiv 2310.06825): each
  query sees a fixed number of recent keys. Stacking layers widens what a token
  can "hear" about, like the receptive field of stacked convolutions.
* dilated window (Longformer): the window skips keys at a fixed stride, covering a
  longer span with the same number of cells.
* global tokens (Longformer, BigBird arXiv 2007.14062): a few positions (e.g.
  [CLS]) attend to everything and everything attends to them.
* random blocks (BigBird): each block of queries also sees a few randomly chosen
  blocks of keys, which keeps the graph's diameter small.

These functions return dense ``(n, n)`` boolean masks: the point is to *see* and
*count* the pattern. Real sparse kernels never build the dense mask.
"""

from __future__ import annotations

import torch
from torch import Tensor

from toolkit.arguments import check_int


def query_key_offsets(n: int, device=None) -> Tensor:
    """``(n, n)`` integer matrix of ``i - j`` (query index minus key index)."""
    i = torch.arange(n, device=device).unsqueeze(1)  # (n, 1)
    j = torch.arange(n, device=device).unsqueeze(0)  # (1, n)
    return i - j


def sliding_window_mask(n: int, window: int, *, device=None) -> Tensor:
    """Causal sliding window: query ``i`` sees keys ``i - window < j <= i``.

    ``window`` counts keys *including the query's own position*, so every query sees
    ``min(i + 1, window)`` keys (Mistral's convention, window 4096). ``window >= n``
    gives the plain causal mask.

    Returns:
        bool ``(n, n)``.
    """
    check_int("n", n)
    check_int("window", window)
    d = query_key_offsets(n, device)  # d = i - j
    return (d >= 0) & (d < window)  # 0 <= i - j < w  <=>  i - w < j <= i


def band_mask(n: int, radius: int, *, device=None) -> Tensor:
    """Bidirectional band: query ``i`` sees keys with ``|i - j| <= radius``.

    Cell count: ``n + 2 * sum_{k=1..r} (n - k)`` (the diagonal plus ``r`` shorter
    off-diagonals on each side), e.g. ``n = 8, r = 1`` gives ``8 + 7 + 7 = 22``,
    not ``8 * 3 = 24``: rows at the edges lose their out-of-range neighbours.

    Returns:
        bool ``(n, n)``.
    """
    check_int("n", n)
    check_int("radius", radius, minimum=0)
    return query_key_offsets(n, device).abs() <= radius  # |i - j| <= r


def dilated_mask(n: int, window: int, dilation: int, causal: bool = True, *, device=None) -> Tensor:
    """Dilated (strided) sliding window (Longformer, arXiv 2004.05150).

    The query sees ``window`` keys per side counting itself, spaced ``dilation``
    apart: keys ``j = i - m * dilation`` for ``m = 0 .. window - 1`` (and, when
    ``causal=False``, also ``j = i + m * dilation``). The span covered is
    ``(window - 1) * dilation + 1`` positions for the price of ``window`` cells.

    ``dilation = 1`` recovers :func:`sliding_window_mask` (causal) or
    :func:`band_mask` with ``radius = window - 1`` (bidirectional).

    Returns:
        bool ``(n, n)``.
    """
    check_int("n", n)
    check_int("window", window)
    check_int("dilation", dilation)
    d = query_key_offsets(n, device)  # i - j
    dist = d if causal else d.abs()
    on_stride = dist.remainder(dilation) == 0  # (i - j) is a multiple of the dilation
    in_reach = (dist >= 0) & (dist <= (window - 1) * dilation)  # at most window-1 strides
    return on_stride & in_reach


def global_token_mask(n: int, global_indices, base: Tensor | None = None, *, device=None) -> Tensor:
    """Add global tokens to a pattern: they attend to all keys and all queries attend to them.

    Args:
        n: sequence length.
        global_indices: iterable of positions (e.g. ``[0]`` for a [CLS] token).
        base: the local pattern to extend, bool ``(n, n)`` (default: nothing else).

    Returns:
        bool ``(n, n)``: ``base`` OR (row is global) OR (column is global).

    This is the bidirectional (encoder) form used by Longformer and BigBird. For a
    decoder, AND the result with :func:`causal_mask`: a global token can then only
    summarise the past.
    """
    check_int("n", n)
    if isinstance(global_indices, Tensor):
        idx = global_indices.reshape(-1).to(dtype=torch.long, device=device)
    else:
        idx = torch.as_tensor(list(global_indices), dtype=torch.long, device=device)
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
        raise ValueError(f"global_indices must lie in [0, {n}), got {idx.tolist()}")
    if base is None:
        mask = torch.zeros(n, n, dtype=torch.bool, device=device)
    else:
        if base.shape != (n, n) or base.dtype != torch.bool:
            raise ValueError(
                f"base must be a bool ({n}, {n}) mask, got {base.dtype} {tuple(base.shape)}"
            )
        mask = base.clone()
    mask[idx, :] = True  # global queries see every key
    mask[:, idx] = True  # every query sees the global keys
    return mask


def random_block_mask(
    n: int,
    block_size: int,
    n_random_blocks: int,
    *,
    seed: int = 0,
    generator: torch.Generator | None = None,
    base: Tensor | None = None,
    device=None,
) -> Tensor:
    """BigBird-style random attention (arXiv 2007.14062), at block granularity.

    The sequence is cut into ``ceil(n / block_size)`` blocks. Every block of queries
    sees ``n_random_blocks`` distinct key blocks drawn uniformly at random (without
    replacement, independently per query block). The draw is reproducible: it uses
    ``generator`` if given, else a fresh ``torch.Generator`` seeded with ``seed``.

    BigBird draws the random blocks among those not already covered by its window
    and global blocks; here the draw is over all blocks and ``base`` (if given) is
    OR-ed in, which keeps the function simple to reason about.

    Returns:
        bool ``(n, n)``.
    """
    check_int("n", n)
    check_int("block_size", block_size)
    check_int("n_random_blocks", n_random_blocks, minimum=0)
    n_blocks = -(-n // block_size)  # ceil(n / block_size)
    if n_random_blocks > n_blocks:
        raise ValueError(
            f"n_random_blocks={n_random_blocks} exceeds the number of blocks {n_blocks}"
        )
    if generator is None:
        generator = torch.Generator().manual_seed(seed)
    chosen = torch.zeros(n_blocks, n_blocks, dtype=torch.bool)  # (query block, key block)
    for qb in range(n_blocks):
        picks = torch.randperm(n_blocks, generator=generator)[:n_random_blocks]
        chosen[qb, picks] = True
    block_of = torch.arange(n) // block_size  # which block each position is in
    mask = chosen[block_of][:, block_of].to(device)  # expand blocks to cells
    if base is not None:
        if base.shape != (n, n) or base.dtype != torch.bool:
            raise ValueError(
                f"base must be a bool ({n}, {n}) mask, got {base.dtype} {tuple(base.shape)}"
            )
        mask = mask | base.to(mask.device)
    return mask


def bigbird_mask(
    n: int,
    block_size: int,
    *,
    window_blocks: int = 3,
    global_blocks: int = 1,
    random_blocks: int = 1,
    seed: int = 0,
    device=None,
) -> Tensor:
    """The three BigBird ingredients together (bidirectional, block granularity).

    * window: query block ``b`` sees key blocks ``b - w//2 .. b + w//2``;
    * global: the first ``global_blocks`` blocks see and are seen by everything;
    * random: ``random_blocks`` random key blocks per query block.

    Returns:
        bool ``(n, n)``.
    """
    check_int("block_size", block_size)
    check_int("window_blocks", window_blocks)
    check_int("global_blocks", global_blocks, minimum=0)
    block_of = torch.arange(n, device=device) // block_size
    block_dist = (block_of[:, None] - block_of[None, :]).abs()
    window = block_dist <= window_blocks // 2
    n_global = min(global_blocks * block_size, n)
    is_global = torch.arange(n, device=device) < n_global  # the first global blocks
    mask = window | is_global[:, None] | is_global[None, :]  # as global_token_mask does
    return random_block_mask(n, block_size, random_blocks, seed=seed, base=mask, device=device)


def mask_cell_count(mask: Tensor) -> int:
    """Number of ``True`` cells: how many (query, key) scores the pattern computes."""
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise ValueError("mask must be a bool tensor (True = may attend)")
    return int(mask.sum())


def receptive_field(n_layers: int, window: int, *, exact: bool = False) -> int:
    """How far back information can travel through ``n_layers`` sliding-window layers.

    Each layer lets a token read ``window`` positions back, so after ``L`` layers
    information can have moved up to ``L * window`` tokens: Mistral 7B
    (arXiv 2310.06825) has 32 layers and window 4096, giving 32 x 4096 = 131,072.
    This is the figure the paper quotes and the default here.

    With the strict window ``i - w < j <= i`` a single hop actually spans ``w - 1``
    positions (the window includes the query itself), so the exact number of
    positions whose information reaches the last token is ``L * (w - 1) + 1``;
    pass ``exact=True`` to get it (32 x 4095 + 1 = 131,041 for Mistral). The test
    suite checks this against powers of the boolean mask.
    """
    check_int("n_layers", n_layers)
    check_int("window", window)
    if exact:
        return n_layers * (window - 1) + 1
    return n_layers * window
