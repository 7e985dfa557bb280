"""Argument checks shared by the positional-encoding modules."""

from __future__ import annotations

ROPE_LAYOUTS = ("half", "interleaved")


def _check_int(name: str, value, *, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _check_even(name: str, value) -> None:
    _check_int(name, value, minimum=2)
    if value % 2:
        raise ValueError(
            f"{name}={value} must be even: features are rotated/encoded in pairs; "
            "use an even dimension"
        )


def _check_base(base) -> None:
    if not (isinstance(base, (int, float)) and base > 1):
        raise ValueError(f"base must be a number > 1 (10000.0 is the usual choice), got {base!r}")


def _check_scale(scale) -> None:
    if not (isinstance(scale, (int, float)) and scale >= 1):
        raise ValueError(
            f"scale = L_new / L_train must be a number >= 1 (1.0 means no extension), got {scale!r}"
        )


def _check_layout(layout) -> None:
    if layout not in ROPE_LAYOUTS:
        raise ValueError(
            f"layout must be 'half' (GPT-NeoX / HF LLaMA) or 'interleaved' (RoFormer / GPT-J), "
            f"got {layout!r}"
        )
