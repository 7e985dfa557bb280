"""Hidden checks for Exercise 6b: the passkey probe.

The models are the check's own: a module that reads the key from its input (after the
first ``#``) and writes the next digit, made wrong on purpose in chosen ways (past a
length, on one digit, when the key sits deep in the prompt). The same class runs in the
student's kernel and here, so the student's accuracy is compared with the toolkit's
``passkey_accuracy`` on exactly the same model.
"""

from __future__ import annotations

import pytest

from autograder.protocol.checklib import CheckFailure, expect_value_error
from toolkit.long_context import passkey_accuracy

pytestmark = pytest.mark.grade_cell("test_passkey_accuracy")

PARTIAL = "Passkey accuracy gives credit for single digits (not the whole number)"
NO_FEEDBACK = "Passkey decoding reads the wrong position's logits"

#: Prompts need at least len(KEY_LINE) + len(QUESTION) = 77 tokens.
#: A model that reads the key. ``wrong_digit``: which answer digit it gets wrong (or -1);
#: ``fail_from``: from this input length on, every digit is off by one; ``depth_limit``:
#: keys placed after this share of the prompt are misread.
ORACLE = '''
import torch

class Oracle(torch.nn.Module):
    def __init__(self, wrong_digit=-1, fail_from=10**9, depth_limit=2.0):
        super().__init__()
        self.wrong_digit, self.fail_from, self.depth_limit = wrong_digit, fail_from, depth_limit

    def forward(self, idx):
        B, T = idx.shape
        logits = torch.zeros(B, T, 256)
        for b, row in enumerate(idx.tolist()):
            first = row.index(35)
            last = len(row) - 1 - row[::-1].index(35)
            done = len(row) - 1 - last
            key = row[first + 1:first + 6]
            if done >= 5:
                logits[b, :, 32] = 1.0
                continue
            digit = key[done] - 48
            if done == self.wrong_digit or T >= self.fail_from or first > self.depth_limit * T:
                digit = (digit + 1) % 10
            logits[b, -1, 48 + digit] = 1.0
            logits[b, :-1, 48 + (digit + 3) % 10] = 1.0  # earlier positions: other digits
        return logits, None
'''

_namespace: dict = {}
exec(ORACLE, _namespace)  # noqa: S102 - the check's own code, also sent to the kernel
Oracle = _namespace["Oracle"]


def _student(submission, settings: dict, keys, length, depth) -> float:
    code = (ORACLE + "model = Oracle(**inputs['settings'])\n"
            "result = passkey_accuracy(model, inputs['keys'], inputs['length'], inputs['depth'])\n")
    out = submission.run(code, settings=settings, keys=list(keys), length=length, depth=depth)
    if isinstance(out, bool) or not isinstance(out, (int, float)):
        raise CheckFailure(f"passkey_accuracy should return a Python float, got "
                           f"{type(out).__name__}")
    return float(out)


CASES = [
    ({}, [12345, 0, 99999, 31415], 90, 0.5),
    ({"wrong_digit": 4}, [11111, 27182], 120, 0.2),
    ({"wrong_digit": 0}, [5, 50000, 123], 84, 0.9),
    ({"depth_limit": 0.5}, [42, 4242, 424, 24, 2, 99], 200, 0.3),
    ({"depth_limit": 0.5}, [42, 4242, 424, 24, 2, 99], 200, 0.8),
    ({"fail_from": 150}, [777, 8888], 146, 0.5),
    ({"fail_from": 150}, [777, 8888], 140, 0.5),
]


@pytest.mark.weight(2)
@pytest.mark.pitfall(PARTIAL)
def test_accuracy_of_hidden_models(submission):
    """Exact-match accuracy of greedy decoding on models that fail in chosen ways."""
    for settings, keys, length, depth in CASES:
        expected = passkey_accuracy(Oracle(**settings), keys, length, depth)
        got = _student(submission, settings, keys, length, depth)
        if abs(got - expected) > 1e-12:
            raise CheckFailure(
                f"a model with {settings or 'no faults'}, {len(keys)} keys, length {length}, "
                f"depth {depth}: expected accuracy {expected:g}, got {got:g}. A key counts "
                "only when all its digits are right")


@pytest.mark.weight(1)
@pytest.mark.pitfall(NO_FEEDBACK)
def test_each_digit_is_read_from_the_last_position(submission):
    """Greedy decoding feeds each digit back and reads the last position's logits."""
    for length in (80, 133):
        got = _student(submission, {}, [24680, 13579, 11235], length, 0.4)
        if got != 1.0:
            raise CheckFailure(
                f"a model that always writes the right next digit at its last position scored "
                f"{got:g} (prompt of {length} tokens); it should score 1.0. Run the model on "
                "the prompt plus the digits chosen so far and take the arg-max of logits[:, -1]")


@pytest.mark.structural
@pytest.mark.weight(0.5)
def test_no_keys_is_rejected(submission):
    """An empty list of keys raises ValueError."""
    with expect_value_error("keys = []", "passkey_accuracy accepted an empty list of keys"):
        submission.run(ORACLE + "result = passkey_accuracy(Oracle(), [], 80, 0.5)\n")
