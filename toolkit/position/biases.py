"""Relative positions as a bias on the attention scores: ALiBi and T5.

* **ALiBi** (arXiv 2108.12409). No embedding at all: subtract ``m_h * (i - j)`` from
  the score, a linear penalty on distance with a different slope per head.
* **T5 relative bias** (arXiv 1910.10683). Bucket the offset ``j - i`` (exact for
  small offsets, logarithmic for large ones) and add a learned scalar per bucket
  and head to the score.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from toolkit.arguments import check_int

# ---------------------------------------------------------------------------
# ALiBi: attention with linear biases (arXiv 2108.12409)
# ---------------------------------------------------------------------------


def geometric_slopes(n: int) -> list[float]:
    """``m_h = 2^(-8h/n)`` for ``h = 1 .. n``: ALiBi's slopes when ``n`` is a power of two."""
    return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]  # m_h = 2^(-8h/n), h = 1..n


def alibi_slopes(n_heads: int) -> Tensor:
    """ALiBi's per-head slopes ``m_h``.

    ``n`` a power of two: the geometric sequence ``m_h = 2^(-8h/n)``, ``h = 1 .. n``
    (8 heads: 1/2, 1/4, ..., 1/256). Otherwise, with ``n'`` the largest power of
    two below ``n``: the ``n'`` slopes for ``n'`` heads, followed by every other
    slope of the ``2n'`` sequence (its 1st, 3rd, 5th, ...) until there are ``n``.
    The extra slopes fall between the first ones, so heads still cover the range of
    distances evenly. Same order as the paper's code and HF BLOOM.

    Returns:
        ``(n_heads,)`` float32 tensor.
    """
    check_int("n_heads", n_heads)
    n_pow2 = 2 ** int(math.floor(math.log2(n_heads)))  # closest power of two <= n
    slopes = geometric_slopes(n_pow2)
    slopes += geometric_slopes(2 * n_pow2)[0::2][: n_heads - n_pow2]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(
    n_heads: int, n_queries: int, n_keys: int | None = None, causal: bool = True
) -> Tensor:
    """The ALiBi score bias ``-m_h * (i - j)``, added to ``q k^T / sqrt(d)`` before softmax.

    Queries are aligned to the *end* of the keys: with ``n_keys > n_queries`` (a KV
    cache) query ``i`` sits at absolute position ``n_keys - n_queries + i``.

    * ``causal=True``: ``-m_h * (i - j)`` for ``j <= i`` and ``-inf`` for ``j > i``,
      so the result is a complete float mask (the causal mask is included).
    * ``causal=False`` (encoders): ``-m_h * |i - j|``, symmetric, no masking.

    Returns:
        ``(n_heads, n_queries, n_keys)`` float32 tensor.
    """
    check_int("n_heads", n_heads)
    check_int("n_queries", n_queries)
    n_keys = n_queries if n_keys is None else n_keys
    check_int("n_keys", n_keys)
    if causal and n_keys < n_queries:
        raise ValueError(
            f"causal ALiBi aligns queries to the end of the keys, so n_keys ({n_keys}) must be "
            f">= n_queries ({n_queries}); pass n_keys = past length + n_queries"
        )
    i = torch.arange(n_keys - n_queries, n_keys, dtype=torch.float32)[:, None]  # query positions
    j = torch.arange(n_keys, dtype=torch.float32)[None, :]  # key positions
    m = alibi_slopes(n_heads)[:, None, None]  # (H, 1, 1)
    if causal:
        bias = -m * (i - j)  # -m_h (i - j), (H, T_q, T_k)
        return bias.masked_fill(j > i, float("-inf"))
    return -m * (i - j).abs()  # -m_h |i - j|


def alibi_bias_key_only(n_heads: int, n_keys: int) -> Tensor:
    """BLOOM's ALiBi form: ``m_h * j``, which depends on the key position only.

    Why it gives the same attention as ``-m_h * (i - j)`` for causal rows: in row
    ``i`` the two differ by ``-m_h * i``, a constant across that row, and softmax
    ignores a constant added to a whole row, ``softmax(z + c) = softmax(z)`` (the
    ``e^c`` cancels between numerator and denominator). It only holds row by row
    over the *visible* keys, so it needs the causal mask, and it does not hold for
    the bidirectional ``-m_h |i - j|``, which is not linear in ``j``. The gain: one
    ``(H, 1, T_k)`` tensor instead of ``(H, T_q, T_k)``. The raw logits (not the
    weights) differ, which matters for e.g. logit soft-capping.

    Returns:
        ``(n_heads, 1, n_keys)`` float32 tensor, broadcasting over queries. Same values
        as HF's ``build_alibi_tensor`` for an all-ones attention mask.
    """
    check_int("n_keys", n_keys)
    j = torch.arange(n_keys, dtype=torch.float32)  # key positions
    return (alibi_slopes(n_heads)[:, None] * j)[:, None, :]  # m_h * j, (H, 1, T_k)


# ---------------------------------------------------------------------------
# T5 relative position bias (arXiv 1910.10683)
# ---------------------------------------------------------------------------


def t5_relative_position_bucket(
    relative_position: Tensor,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> Tensor:
    """Map the offset ``key_pos - query_pos`` to one of ``num_buckets`` buckets, like T5.

    * Bidirectional (encoder): half the buckets for keys to the left or at the
      query (offset <= 0), half for keys to the right (offset > 0, shifted by
      ``num_buckets / 2``). Causal (decoder): all buckets for the past; every future
      key lands in bucket 0 (it is masked anyway).
    * Within a half of ``n`` buckets, distances ``0 .. n/2 - 1`` get a bucket each;
      larger distances share log-spaced buckets:
      ``n/2 + floor(ln(dist / (n/2)) / ln(max_distance / (n/2)) * (n - n/2))``,
      capped at ``n - 1``: every distance ``>= max_distance`` shares the last bucket.

    Matches HF ``T5Attention._relative_position_bucket`` exactly.

    Args:
        relative_position: integer tensor of ``key_pos - query_pos``, any shape.

    Returns:
        long tensor of the same shape with values in ``[0, num_buckets)``.
    """
    if not isinstance(relative_position, Tensor) or relative_position.dtype.is_floating_point:
        raise ValueError("relative_position must be an integer tensor of key_pos - query_pos")
    check_int("num_buckets", num_buckets, minimum=2)
    rel = relative_position.long()
    bucket = torch.zeros_like(rel)
    n = num_buckets
    if bidirectional:
        n //= 2
        bucket = bucket + (rel > 0).long() * n  # keys to the right use the upper half
        dist = rel.abs()
    else:
        dist = (-rel).clamp(min=0)  # distance into the past; future keys -> 0
    n_exact = n // 2  # one bucket per distance below this
    if n_exact < 1 or max_distance <= n_exact:
        raise ValueError(
            f"need num_buckets >= {4 if bidirectional else 2} and max_distance > {n_exact} "
            f"(the exact range), got num_buckets={num_buckets}, max_distance={max_distance}"
        )
    # n_exact + floor(ln(dist / n_exact) / ln(max_distance / n_exact) * (n - n_exact)).
    # Evaluated in float32 in this order, like HF, so that a distance whose exact
    # value sits on a bucket edge is rounded the same way. (clamp avoids log(0).)
    log_span = math.log(max_distance / n_exact)
    log_ratio = torch.log(dist.clamp(min=n_exact).float() / n_exact) / log_span
    log_bucket = n_exact + (log_ratio * (n - n_exact)).long()
    log_bucket = log_bucket.clamp(max=n - 1)
    return bucket + torch.where(dist < n_exact, dist, log_bucket)


class T5RelativePositionBias(nn.Module):
    """A learned scalar per (bucket, head), added to the attention scores (T5).

    ``bias[h, i, j] = relative_attention_bias.weight[bucket(j - i), h]``. The
    parameter name follows HF (``relative_attention_bias``, an ``nn.Embedding`` of
    shape ``(num_buckets, n_heads)``), so a T5 checkpoint's first-layer weight loads
    directly. T5 computes it once, in the first layer, and shares it with the rest.
    """

    def __init__(
        self,
        n_heads: int,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
    ):
        super().__init__()
        check_int("n_heads", n_heads)
        check_int("num_buckets", num_buckets, minimum=2)
        check_int("max_distance", max_distance)
        self.n_heads, self.num_buckets = n_heads, num_buckets
        self.max_distance, self.bidirectional = max_distance, bidirectional
        self.relative_attention_bias = nn.Embedding(num_buckets, n_heads)

    def forward(self, n_queries: int, n_keys: int | None = None, query_offset: int = 0) -> Tensor:
        """
        Args:
            n_queries: ``T_q``.
            n_keys: ``T_k`` (default ``T_q``).
            query_offset: absolute position of the first query (a decoder with a KV
                cache of ``P`` tokens passes ``P``; HF's ``past_seen_tokens``).

        Returns:
            ``(1, n_heads, T_q, T_k)`` bias to add to the scores.
        """
        check_int("n_queries", n_queries)
        n_keys = n_queries if n_keys is None else n_keys
        check_int("n_keys", n_keys)
        check_int("query_offset", query_offset, minimum=0)
        device = self.relative_attention_bias.weight.device
        i = torch.arange(n_queries, device=device)[:, None] + query_offset  # query positions
        j = torch.arange(n_keys, device=device)[None, :]  # key positions
        buckets = t5_relative_position_bucket(
            j - i, self.bidirectional, self.num_buckets, self.max_distance
        )  # (T_q, T_k)
        values = self.relative_attention_bias(buckets)  # (T_q, T_k, H)
        return values.permute(2, 0, 1).unsqueeze(0)  # (1, H, T_q, T_k)
