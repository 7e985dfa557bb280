"""Hidden checks for Exercise 5b: ``MaskedLMDataset``, static and dynamic masking.

Each check builds the student's dataset in their kernel (masks drawn with *their*
``mask_tokens``) and asks for several epochs of batches. Dynamic masking must give a new
mask every time: two independent draws select the same set of positions for a given
token with probability ``0.85^2 + 0.15^2 = 0.745``, never always. Static masking must
repeat itself exactly and not depend on how the batches are cut.
"""

from __future__ import annotations

import math

import pytest
import torch

from autograder.protocol.checklib import CheckFailure

pytestmark = pytest.mark.grade_cell("test_masked_lm_dataset")

SAME = "Same mask every epoch where dynamic masking was asked"
V, MASK = 60, 4
SPECIALS = [0, 1, 2, 3, 4]

# In the student's kernel: one dataset, the labels of every epoch (and of a split epoch).
RUN = """
import torch as _torch

_data = MaskedLMDataset(inputs["ids"], inputs["specials"], inputs["mask_id"], inputs["vocab_size"],
                        dynamic=inputs["dynamic"], seed=inputs["mask_seed"])
_all = _torch.arange(len(_data))
_epochs = [_data.batch(_all)[1] for _ in range(inputs["epochs"])]
_half = len(_data) // 2
_split = _torch.cat([_data.batch(_all[_half:])[1], _data.batch(_all[:_half])[1]])
result = (_torch.stack(_epochs), _split, len(_data))
"""


def _ids(n=400, t=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (n, t), generator=g)
    ids[:, 0], ids[:, -1] = 2, 3
    return ids


def _epochs(submission, dynamic, epochs=6, seed=0):
    ids = _ids(seed=seed)
    got = submission.run(RUN, ids=ids, specials=SPECIALS, mask_id=MASK, vocab_size=V,
                         dynamic=dynamic, mask_seed=seed, epochs=epochs)
    if not isinstance(got, tuple) or len(got) != 3:
        raise CheckFailure("could not read the batches of your MaskedLMDataset")
    labels, split, length = got
    if not isinstance(labels, torch.Tensor) or labels.shape != (epochs, *ids.shape):
        raise CheckFailure(f"batch(indices) should return labels of shape (len(indices), T) = "
                           f"{tuple(ids.shape)} for the whole dataset")
    if length != len(ids):
        raise CheckFailure(f"len(dataset) should be the number of sequences, {len(ids)}")
    return ids, labels != -100, split != -100


@pytest.mark.weight(3)
@pytest.mark.pitfall(SAME)
def test_dynamic_masks_change_every_epoch(submission):
    """dynamic=True: each epoch draws a new mask (agreement between epochs about 74.5%)."""
    ids, selected, _ = _epochs(submission, dynamic=True)
    ordinary = torch.ones_like(ids, dtype=torch.bool)
    ordinary[:, 0] = ordinary[:, -1] = False
    n = int(ordinary.sum())
    for e in range(1, selected.size(0)):
        same = int((selected[e] == selected[0])[ordinary].sum())
        if same == n:
            raise CheckFailure(f"dynamic=True served exactly the same mask in epoch {e + 1} as in "
                               "epoch 1: draw every mask from the one generator made in __init__ "
                               "(a new generator with the same seed per batch repeats the mask)")
        p = 0.85**2 + 0.15**2
        if abs(same - n * p) > 5 * math.sqrt(n * p * (1 - p)):
            raise CheckFailure(f"epochs 1 and {e + 1} agree on {same / n:.1%} of the positions; "
                               f"independent masks agree on about {p:.1%}")


@pytest.mark.weight(2)
@pytest.mark.property
def test_static_masks_repeat(submission):
    """dynamic=False: the same mask every epoch, whatever the batches."""
    _, selected, split = _epochs(submission, dynamic=False, seed=1)
    for e in range(1, selected.size(0)):
        if not torch.equal(selected[e], selected[0]):
            raise CheckFailure(f"dynamic=False served a different mask in epoch {e + 1}: mask the "
                               "whole dataset once, in __init__, and serve rows of that")
    half = len(split) // 2
    reordered = torch.cat([split[half:], split[:half]])
    if not torch.equal(reordered, selected[0]):
        raise CheckFailure("with static masking a sequence's mask depended on the batch it came "
                           "in: mask every sequence once, in __init__, then index")


def test_masks_follow_the_recipe(submission):
    """Across epochs every ordinary token is selected about 15% of the time, specials never."""
    ids, selected, _ = _epochs(submission, dynamic=True, epochs=10, seed=2)
    if selected[:, :, [0, -1]].any():
        raise CheckFailure("[CLS] or [SEP] got a label: special tokens are never selected")
    count, n = int(selected[:, :, 1:-1].sum()), selected[:, :, 1:-1].numel()
    if abs(count - 0.15 * n) > 5 * math.sqrt(n * 0.15 * 0.85):
        raise CheckFailure(f"{count / n:.1%} of the ordinary tokens were selected over 10 epochs; "
                           "expected about 15%")
