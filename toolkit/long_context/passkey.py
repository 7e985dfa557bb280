"""The passkey probe: a number hidden in filler text, and the model asked to repeat it.

The classic long-context probe (Mohtashami and Jaggi, arXiv 2305.16300): repetitive
filler, one sentence holding a random number somewhere inside it, and at the end the
question. A model that can attend back over the whole input repeats the number; one whose
positions broke down beyond its training length cannot. Byte tokens (the course's
:class:`toolkit.data.ByteTokenizer`), so every character is one token.

A prompt of ``length`` tokens is laid out as::

    filler[:a] + KEY_LINE.format(key) + filler[:b] + QUESTION

with ``a + b`` chosen so the whole prompt has exactly ``length`` tokens and ``a`` the
share ``depth`` of the filler (``a = round(depth * (a + b))``): depth 0 puts the number
at the start, depth 1 just before the question. The answer is the ``DIGITS`` digits of
``key``, which the model should write next.
"""

from __future__ import annotations

import torch
from torch import Tensor

from toolkit.arguments import check_int

#: Filler sentences, repeated as often as needed (the passkey papers' own).
FILLER = (
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
)
#: The sentence that hides the key (``{key}`` is the number, zero-padded to DIGITS).
KEY_LINE = "The pass key is #{key}#. Remember it. "
#: The question that ends every prompt; the model's next tokens should be the key.
QUESTION = "What is the pass key? The pass key is #"
#: Digits of every key.
DIGITS = 5


def passkey_text(key: int, length: int, depth: float) -> str:
    """The prompt as text: exactly ``length`` characters, the key line at ``depth``.

    Args:
        key: ``0 <= key < 10^DIGITS``, written with ``DIGITS`` digits.
        length: total characters (tokens), at least the key line plus the question.
        depth: in ``[0, 1]``, where in the filler the key line sits.
    """
    check_int("key", key, minimum=0)
    if key >= 10**DIGITS:
        raise ValueError(f"key must have at most {DIGITS} digits, got {key}")
    if not 0 <= depth <= 1:
        raise ValueError(f"depth must be in [0, 1], got {depth!r}")
    line = KEY_LINE.format(key=f"{key:0{DIGITS}d}")
    n_filler = length - len(line) - len(QUESTION)
    check_int("length - len(KEY_LINE) - len(QUESTION)", n_filler, minimum=0)
    before = round(depth * n_filler)  # filler characters before the key line
    filler = FILLER * (n_filler // len(FILLER) + 1)
    return filler[:before] + line + filler[:n_filler - before] + QUESTION


def passkey_tokens(key: int, length: int, depth: float) -> tuple[Tensor, Tensor]:
    """``(prompt, answer)``: ``(length,)`` and ``(DIGITS,)`` int64 byte tokens."""
    prompt = torch.tensor(list(passkey_text(key, length, depth).encode()), dtype=torch.long)
    answer = torch.tensor(list(f"{key:0{DIGITS}d}".encode()), dtype=torch.long)
    return prompt, answer


def passkey_batch(batch_size: int, length: int, generator: torch.Generator) -> Tensor:
    """Training windows ``(batch_size, length + 1)``: prompts of ``length + 1 - DIGITS``
    tokens at random depths with random keys, followed by their answers."""
    rows = []
    for _ in range(batch_size):
        key = int(torch.randint(10**DIGITS, (1,), generator=generator))
        depth = float(torch.rand((), generator=generator))
        prompt, answer = passkey_tokens(key, length + 1 - DIGITS, depth)
        rows.append(torch.cat((prompt, answer)))
    return torch.stack(rows)
