"""Argument checks: plain numbers and positional-encoding settings."""

from __future__ import annotations

#: The two memory layouts of RoPE's feature pairs (see :func:`toolkit.position.apply_rope`).
ROPE_LAYOUTS = ("half", "interleaved")


# --------------------------------------------------------------------------------------
# Numbers
# --------------------------------------------------------------------------------------


def check_int(name: str, value, *, minimum: int = 1) -> None:
    """``value`` is an ``int`` (a ``bool`` is not) and at least ``minimum``.

    ``minimum=1`` (the default) for sizes and counts, ``minimum=0`` where zero makes
    sense (an empty table, no extra blocks).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_even(name: str, value) -> None:
    """``value`` is an even integer >= 2: a feature size split into pairs."""
    check_int(name, value, minimum=2)
    if value % 2:
        raise ValueError(
            f"{name}={value} must be even: features are rotated/encoded in pairs; "
            "use an even dimension"
        )


def check_dropout(dropout) -> None:
    """A dropout probability ``p`` with ``0 <= p < 1`` (``p = 1`` would drop everything)."""
    if not (isinstance(dropout, (int, float)) and 0.0 <= dropout < 1.0):
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")


# --------------------------------------------------------------------------------------
# Positional-encoding settings
# --------------------------------------------------------------------------------------


def check_frequency_base(base) -> None:
    """The geometric base of sinusoid / RoPE frequencies ``base^(-2i/d)``: a number > 1."""
    if not (isinstance(base, (int, float)) and base > 1):
        raise ValueError(f"base must be a number > 1 (10000.0 is the usual choice), got {base!r}")


def check_context_scale(scale) -> None:
    """A context-extension factor ``s = L_new / L_train >= 1`` (1 means no extension)."""
    if not (isinstance(scale, (int, float)) and scale >= 1):
        raise ValueError(
            f"scale = L_new / L_train must be a number >= 1 (1.0 means no extension), got {scale!r}"
        )


def check_rope_layout(layout) -> None:
    """One of :data:`ROPE_LAYOUTS`: ``"half"`` or ``"interleaved"``."""
    if layout not in ROPE_LAYOUTS:
        raise ValueError(
            f"layout must be 'half' (GPT-NeoX / HF LLaMA) or 'interleaved' (RoFormer / GPT-J), "
            f"got {layout!r}"
        )


