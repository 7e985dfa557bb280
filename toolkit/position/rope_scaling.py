"""RoPE context extension: run a model trained on ``L_train`` tokens at ``L_new = s * L_train``.

Pair ``i`` makes ``L_train / wavelength_i = L_train * theta_i / (2 pi)`` turns over the
training context. Fast pairs (many turns) have seen every angle during training; slow
pairs (less than one turn) have only seen a small arc, and positions beyond ``L_train``
push them onto angles they never saw. The methods below differ in which pairs they
slow down, and by how much: position interpolation, NTK-aware and dynamic NTK base
changes, YaRN's per-band ramp plus temperature, LongRoPE's per-band factors.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from toolkit.arguments import check_context_scale, check_even, check_frequency_base, check_int
from toolkit.position.rope import rope_inv_freq


def rope_inv_freq_linear(
    d_head: int, base: float = 10000.0, scale: float = 1.0, *, dtype: torch.dtype = torch.float32
) -> Tensor:
    """Position interpolation (PI, arXiv 2306.15595): positions divided by ``s``.

    ``(p / s) * theta_i = p * (theta_i / s)``, so dividing every angular speed by
    ``s`` is the same as squeezing positions ``0 .. sL`` into the trained range
    ``0 .. L``. Every pair is slowed down equally, including the fast ones whose
    neighbouring-token angle difference now shrinks ``s`` times (short-range
    resolution is lost; a short fine-tune recovers it). Matches HF's ``"linear"``
    rope type.

    Returns:
        ``(d_head / 2,)`` tensor ``theta_i / s``.
    """
    check_context_scale(scale)
    return rope_inv_freq(d_head, base, dtype=torch.float64).div(scale).to(dtype)  # theta_i / s


def ntk_base(d_head: int, base: float, scale: float) -> float:
    """NTK-aware base ``base' = base * s^(d/(d-2))``: the slowest pair ends ``s`` times slower."""
    return base * scale ** (d_head / (d_head - 2))  # base' = base * s^(d/(d-2))


def rope_inv_freq_ntk(
    d_head: int, base: float = 10000.0, scale: float = 1.0, *, dtype: torch.dtype = torch.float32
) -> Tensor:
    """NTK-aware scaling: keep the formula, enlarge the base, ``base' = base * s^(d/(d-2))``.

    With ``theta_i = base'^(-2i/d)`` the fastest pair (``i = 0``) is unchanged and
    the slowest (``2i = d - 2``) gets ``base^(-(d-2)/d) * s^(-1)``: exactly ``theta/s``.
    In between the slow-down grows geometrically, so high frequencies extrapolate
    and low frequencies interpolate. No fine-tuning needed for moderate ``s``.

    HF has no static "ntk" rope type; this equals HF's ``"dynamic"`` type with
    ``factor=1`` evaluated at ``seq_len = s * max_position_embeddings``.

    Returns:
        ``(d_head / 2,)`` tensor.
    """
    check_even("d_head", d_head)
    check_context_scale(scale)
    if d_head < 4:
        raise ValueError(f"d_head must be >= 4 for NTK scaling (exponent d/(d-2)), got {d_head}")
    return rope_inv_freq(d_head, ntk_base(d_head, base, scale), dtype=dtype)


def rope_inv_freq_dynamic_ntk(
    d_head: int,
    base: float,
    seq_len: int,
    max_position_embeddings: int,
    scale: float,
    *,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Dynamic NTK: recompute the NTK base from the current length (HF ``"dynamic"``).

    Inside the trained length nothing changes (plain RoPE, full precision on short
    inputs). Beyond it, with ``L = max_position_embeddings`` and ``T = seq_len``:

        base' = base * (s * T / L - (s - 1)) ^ (d / (d-2))

    The bracket is 1 at ``T = L`` and grows linearly with slope ``s / L``. This is
    HF's (and the original Reddit post's) convention; note that at ``T = s * L`` the
    effective NTK scale is ``s^2 - s + 1``, not ``s`` (with ``scale=1`` it is ``T / L``).

    Differences from HF, which this function is stateless about: HF evaluates it at
    ``T = max(position_ids) + 1``, keeps the largest ``inv_freq`` computed so far and
    resets to the original when the input becomes short again; keys already in a
    KV cache keep the rotation computed with the older base.

    Returns:
        ``(d_head / 2,)`` tensor.
    """
    check_even("d_head", d_head)
    check_int("seq_len", seq_len)
    check_int("max_position_embeddings", max_position_embeddings)
    check_context_scale(scale)
    if d_head < 4:
        raise ValueError(f"d_head must be >= 4 for NTK scaling (exponent d/(d-2)), got {d_head}")
    T = max(seq_len, max_position_embeddings)  # inside the trained length: plain RoPE
    growth = scale * T / max_position_embeddings - (scale - 1)  # s T / L - (s - 1)
    return rope_inv_freq(d_head, ntk_base(d_head, base, growth), dtype=dtype)


def yarn_band_ratios(d_head: int, base: float, original_max_position_embeddings: int) -> Tensor:
    """``r_i = L_train / wavelength_i = L_train * theta_i / (2 pi)``: turns per training context.

    Returns:
        ``(d_head / 2,)`` float64 tensor, decreasing with ``i``.
    """
    check_int("original_max_position_embeddings", original_max_position_embeddings)
    theta = rope_inv_freq(d_head, base, dtype=torch.float64)
    return original_max_position_embeddings * theta / (2 * math.pi)  # r_i = L / (2 pi / theta_i)


def yarn_inv_freq_and_temperature(
    d_head: int,
    base: float,
    scale: float,
    original_max_position_embeddings: int,
    beta_fast: float = 32,
    beta_slow: float = 1,
    *,
    truncate: bool = True,
    ramp: str = "index",
) -> tuple[Tensor, float]:
    """YaRN (arXiv 2309.00071): interpolate slow pairs, keep fast ones, ramp between.

    With ``r_i`` from :func:`yarn_band_ratios` (turns per training context),
    ``alpha = beta_slow = 1`` and ``beta = beta_fast = 32``, and a blend
    ``gamma_i`` in ``[0, 1]``:

        theta'_i = (1 - gamma_i) * theta_i / s + gamma_i * theta_i

    * ``r_i > beta`` (many turns, every angle already seen): ``gamma = 1``, untouched.
    * ``r_i < alpha`` (less than one turn): ``gamma = 0``, fully interpolated ``theta/s``.
    * in between: a linear ramp.

    Plus an attention temperature: ``sqrt(1/t) = 0.1 ln(s) + 1`` (1 when ``s <= 1``).
    It multiplies cos and sin (pass it as ``attention_scaling`` to :func:`apply_rope`),
    so it scales *both* q and k and the logits are multiplied by ``(0.1 ln s + 1)^2 = 1/t``.

    Ramp conventions (``ramp``):

    * ``"index"`` (default, = HF ``_compute_yarn_parameters`` and the authors'
      reference code): the ramp is linear in the pair *index* ``i`` between
      ``i_fast`` and ``i_slow``, the (fractional) indices where ``r_i`` equals
      ``beta_fast`` and ``beta_slow``. Since ``ln r_i`` is linear in ``i``, this is a
      ramp linear in ``ln r``. With ``truncate=True`` (HF's default) the ends are
      rounded outwards, ``floor(i_fast)`` and ``ceil(i_slow)``, so up to one band on
      each side of the transition is partly blended although its ``r`` is just
      beyond ``beta``/``alpha``. As in HF, the ends are clamped to ``[0, d - 1]``.
    * ``"ratio"``: the paper's equation, ``gamma = clip((r - alpha) / (beta - alpha), 0, 1)``,
      linear in ``r`` itself (``truncate`` is ignored).

    Not covered: HF's DeepSeek-style ``mscale`` / ``mscale_all_dim`` options and
    ``partial_rotary_factor`` (pass the rotary width as ``d_head``).

    Returns:
        ``(inv_freq, attention_factor)``: ``(d_head / 2,)`` float32 tensor and the float
        ``0.1 ln s + 1``.
    """
    check_even("d_head", d_head)
    check_frequency_base(base)
    check_context_scale(scale)
    if not (0 < beta_slow < beta_fast):
        raise ValueError(
            f"need 0 < beta_slow < beta_fast (defaults 1 and 32), got {beta_slow}, {beta_fast}"
        )
    if ramp not in ("index", "ratio"):
        raise ValueError(
            f"ramp must be 'index' (HF / reference code) or 'ratio' (paper), got {ramp!r}"
        )
    L = original_max_position_embeddings
    r = yarn_band_ratios(d_head, base, L)  # (d/2,), float64
    if ramp == "index":

        def band_index(turns: float) -> float:
            # solve L * base^(-2i/d) / (2 pi) = turns for i
            return d_head * math.log(L / (2 * math.pi * turns)) / (2 * math.log(base))

        lo, hi = band_index(beta_fast), band_index(beta_slow)
        if truncate:
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, d_head - 1)
        if lo == hi:
            hi += 0.001  # avoid 0/0, as HF does
        i = torch.arange(d_head // 2, dtype=torch.float64)
        gamma = 1 - ((i - lo) / (hi - lo)).clamp(0, 1)  # 1 at i <= lo (fast), 0 at i >= hi (slow)
    else:
        gamma = ((r - beta_slow) / (beta_fast - beta_slow)).clamp(0, 1)  # (r - a) / (b - a)
    theta = rope_inv_freq(d_head, base, dtype=torch.float64)
    inv_freq = (1 - gamma) * theta / scale + gamma * theta  # (1-g) theta/s + g theta
    attention_factor = 0.1 * math.log(scale) + 1.0 if scale > 1 else 1.0  # sqrt(1/t)
    return inv_freq.to(torch.float32), attention_factor


def longrope_inv_freq(
    d_head: int,
    base: float,
    rescale_factors,
    *,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """LongRoPE (arXiv 2402.13753): one given rescale factor per pair, ``theta_i / lambda_i``.

    LongRoPE *searches* the factors ``lambda_i`` (evolutionary search on perplexity);
    here they are given, as in a checkpoint's config (Phi-3's ``short_factor`` /
    ``long_factor``). HF uses ``short_factor`` while the length is within
    ``original_max_position_embeddings`` and ``long_factor`` beyond it, and scales
    cos/sin by :func:`longrope_attention_factor`.

    Args:
        rescale_factors: ``d_head / 2`` positive numbers (sequence or tensor).

    Returns:
        ``(d_head / 2,)`` tensor.
    """
    check_even("d_head", d_head)
    lam = torch.as_tensor(rescale_factors, dtype=torch.float64)
    if lam.shape != (d_head // 2,):
        raise ValueError(
            f"rescale_factors must hold d_head / 2 = {d_head // 2} numbers, "
            f"got shape {tuple(lam.shape)}"
        )
    if not bool((lam > 0).all()):
        raise ValueError("rescale_factors must all be > 0 (1.0 leaves a pair unchanged)")
    return (rope_inv_freq(d_head, base, dtype=torch.float64) / lam).to(dtype)  # theta_i / lambda_i


def longrope_attention_factor(scale: float, original_max_position_embeddings: int) -> float:
    """LongRoPE / Phi-3 attention factor ``sqrt(1 + ln s / ln L_train)`` (1 when ``s <= 1``)."""
    check_int("original_max_position_embeddings", original_max_position_embeddings, minimum=2)
    if scale <= 1:
        return 1.0
    return math.sqrt(1 + math.log(scale) / math.log(original_max_position_embeddings))


def longrope_inv_freq_and_attention_factor(
    d_head: int,
    base: float,
    short_factor,
    long_factor,
    seq_len: int,
    original_max_position_embeddings: int,
    scale: float,
    *,
    dtype: torch.dtype = torch.float32,
) -> tuple[Tensor, float]:
    """LongRoPE as a checkpoint runs it (HF ``"longrope"`` rope type, Phi-3): switch and factor.

    Two factor sets ship with the model: ``short_factor`` for inputs that fit the
    original window and ``long_factor`` for longer ones. With
    ``L = original_max_position_embeddings`` and ``T = seq_len`` (HF:
    ``max(position_ids) + 1``):

        lambda = long_factor if T > L else short_factor      (T = L is still short)
        theta'_i = theta_i / lambda_i
        attention_factor = sqrt(1 + ln s / ln L)              (1 when s <= 1)

    The attention factor depends on ``s`` alone, not on ``T``: HF computes it once and
    multiplies cos and sin by it for short and long inputs alike, so it scales both q and
    k and the logits grow by its square, ``1 + ln s / ln L``. ``scale`` is HF's
    ``factor``; a Phi-3 config leaves it out and HF takes
    ``max_position_embeddings / original_max_position_embeddings``.

    Returns:
        ``(inv_freq, attention_factor)``: ``(d_head / 2,)`` tensor of ``dtype`` and a float.
    """
    check_int("seq_len", seq_len)
    check_context_scale(scale)
    long = seq_len > original_max_position_embeddings  # past the original window
    factors = long_factor if long else short_factor
    inv_freq = longrope_inv_freq(d_head, base, factors, dtype=dtype)  # theta_i / lambda_i
    attention_factor = longrope_attention_factor(scale, original_max_position_embeddings)
    return inv_freq, attention_factor
