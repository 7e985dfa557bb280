"""Hidden checks for Exercise 5a: ``mask_tokens``, BERT's masked-LM recipe.

The student's function runs in their kernel on thousands of sequences with a seeded
generator. Every rate is then compared here with what the recipe promises, within five
binomial standard deviations: ``|count - n p| <= 5 sqrt(n p (1 - p))``. A correct
implementation fails such a check with probability below one in a million, whatever its
order of random draws; a wrong rate (masking unselected tokens, 2% random instead of 10%)
misses by dozens of deviations. Exact facts (labels, untouched tokens, special tokens,
the input left unmodified, reproducibility) are checked exactly.
"""

from __future__ import annotations

import math

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, expect_tensor

pytestmark = pytest.mark.grade_cell("test_mask_tokens")

LABELS = "MLM labels not -100 on unselected positions"
ALL = "80/10/10 applied to all tokens instead of the selected 15%"
SPECIAL = "Special tokens can be selected for masking"
RANDOM = "Random replacements drawn with 10% of the unmasked 20% (2% of the selected)"

V, MASK, PAD, UNK, CLS, SEP = 60, 4, 0, 1, 2, 3
SPECIALS = [0, 1, 2, 3, 4]
SIGMAS = 5.0

# In the student's kernel: mask a batch with a seeded generator; return what came back and
# the input afterwards (it must not have been modified).
RUN = """
import torch as _torch

_ids = inputs["ids"].clone()
_g = _torch.Generator().manual_seed(inputs["mask_seed"])
_out = mask_tokens(_ids, inputs["specials"], inputs["mask_id"], inputs["vocab_size"],
                   *inputs["probs"], generator=_g)
result = (_out[0], _out[1], _ids)
"""


def _batch(n: int = 3000, t: int = 24, seed: int = 0) -> torch.Tensor:
    """``[CLS] A [SEP] B [SEP] [PAD]...`` rows of ordinary ids, with [UNK] and [MASK] inside."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (n, t), generator=g)
    ids[:, 0], ids[:, 10], ids[:, 19] = CLS, SEP, SEP
    ids[:, 20:] = PAD
    ids[:, 5] = UNK
    ids[::7, 14] = MASK  # a [MASK] already in the text is special too
    return ids


def _mask(submission, ids, seed=1, probs=(0.15, 0.8, 0.1)):
    got = submission.run(RUN, ids=ids, mask_seed=seed, specials=SPECIALS, mask_id=MASK,
                         vocab_size=V, probs=list(probs))
    if not isinstance(got, tuple) or len(got) != 3:
        raise CheckFailure("mask_tokens should return a pair (inputs, labels)")
    inputs, labels, after = got
    for name, value in (("inputs", inputs), ("labels", labels)):
        expect_tensor(value, shape=ids.shape, name=f"the returned {name}")
        if value.dtype != ids.dtype:
            raise CheckFailure(f"the returned {name} have dtype {value.dtype}; keep the token ids' "
                               f"dtype {ids.dtype}")
    if not torch.equal(after, ids):
        raise CheckFailure("mask_tokens modified input_ids in place: clone it before writing")
    return inputs, labels


def _within(count: int, n: int, p: float, what: str, hint: str) -> None:
    sd = math.sqrt(n * p * (1 - p))
    if abs(count - n * p) > SIGMAS * sd:
        raise CheckFailure(f"{what}: {count} of {n} ({count / max(n, 1):.4f}); the recipe gives "
                           f"{p:.4f} (allowed: {SIGMAS:g} standard deviations, +-"
                           f"{SIGMAS * sd / max(n, 1):.4f}). Hint: {hint}")


@pytest.mark.weight(2)
@pytest.mark.pitfall(LABELS)
def test_labels(submission):
    """labels: the original id where selected, -100 everywhere else (about 15% selected)."""
    ids = _batch()
    inputs, labels = _mask(submission, ids)
    if torch.equal(labels, ids):
        raise CheckFailure("labels equal input_ids everywhere: set labels to -100 where a token "
                           "was not selected, so the loss sees only the selected positions")
    selected = labels != -100
    if not torch.equal(labels[selected], ids[selected]):
        raise CheckFailure("at a selected position the label must be the *original* id (from "
                           "input_ids, before any replacement)")
    if not selected.any():
        raise CheckFailure("no position was selected: every label is -100")
    ordinary = ~torch.isin(ids, torch.tensor(SPECIALS))
    _within(int((selected & ordinary).sum()), int(ordinary.sum()), 0.15,
            "share of ordinary tokens with a label", "select with probability mlm_probability")


@pytest.mark.weight(2)
@pytest.mark.pitfall(SPECIAL)
def test_special_tokens_never_selected(submission):
    """[CLS], [SEP], [PAD], [UNK] and [MASK] never get a label and are never replaced."""
    ids = _batch(seed=2)
    inputs, labels = _mask(submission, ids, seed=3)
    special = torch.isin(ids, torch.tensor(SPECIALS))
    hit = (labels[special] != -100).sum() + (inputs[special] != ids[special]).sum()
    if hit:
        raise CheckFailure(f"special tokens were selected or replaced ({int(hit)} times): give "
                           "them probability 0 before drawing "
                           "(probability.masked_fill_(special, 0))")


@pytest.mark.pitfall(SPECIAL)
def test_special_ids_and_mask_id_come_from_the_arguments(submission):
    """Another vocabulary layout: special ids [0, 7, 9] and [MASK] = 9, so ids 1 to 4 are
    ordinary words here (nothing about the course vocabulary may be hard-coded)."""
    g = torch.Generator().manual_seed(13)
    ids = torch.randint(1, V, (2000, 24), generator=g)
    ids[(ids == 7) | (ids == 9)] = 8
    ids[:, 0], ids[:, -1], ids[::5, 12] = 7, 0, 9
    specials, mask_id = [0, 7, 9], 9
    got = submission.run(RUN, ids=ids, mask_seed=14, specials=specials, mask_id=mask_id,
                         vocab_size=V, probs=[0.15, 0.8, 0.1])
    if not isinstance(got, tuple) or len(got) != 3:
        raise CheckFailure("mask_tokens should return a pair (inputs, labels)")
    inputs = expect_tensor(got[0], shape=tuple(ids.shape), name="inputs")
    labels = expect_tensor(got[1], shape=tuple(ids.shape), name="labels")
    selected = labels != -100
    if selected[torch.isin(ids, torch.tensor(specials))].any():
        raise CheckFailure("with special_ids=[0, 7, 9], a token with one of those ids was "
                           "selected: take the special ids from the argument")
    if not selected[(ids >= 1) & (ids <= 4)].any():
        raise CheckFailure("with special_ids=[0, 7, 9], ids 1 to 4 are ordinary words but none "
                           "was ever selected: take the special ids from the argument, not the "
                           "course vocabulary's")
    n = int(selected.sum())
    _within(int((inputs[selected] == mask_id).sum()), n, 0.8 + 0.1 / V,
            "selected tokens that became [MASK] (mask_token_id=9 here)",
            "write mask_token_id, the argument, not the course vocabulary's [MASK] id")


@pytest.mark.weight(2)
@pytest.mark.pitfall(ALL)
@pytest.mark.property
def test_unselected_tokens_untouched(submission):
    """A token that was not selected reaches the model unchanged: 80/10/10 is for the 15% only."""
    ids = _batch(seed=4)
    inputs, labels = _mask(submission, ids, seed=5)
    unselected = labels == -100
    if unselected.all() or not unselected.any():
        raise CheckFailure("either every token or none was selected (labels -100 everywhere or "
                           "nowhere): select each ordinary token with probability mlm_probability")
    changed = int((inputs[unselected] != ids[unselected]).sum())
    if changed:
        share = changed / int(unselected.sum())
        raise CheckFailure(f"{share:.1%} of the tokens that were *not* selected were replaced: "
                           "draw [MASK] / random / unchanged among the selected tokens only "
                           "(& selected)")


@pytest.mark.weight(3)
@pytest.mark.pitfall(RANDOM)
def test_80_10_10(submission):
    """Of the selected tokens: 80% [MASK], 10% a random id, 10% unchanged (over ~7,000)."""
    ids = _batch(seed=6)
    inputs, labels = _mask(submission, ids, seed=7)
    selected = labels != -100
    n = int(selected.sum())
    if n < 1000:
        raise CheckFailure(f"only {n} tokens were selected out of {ids.numel()}: select about 15% "
                           "of the ordinary tokens")
    new, old = inputs[selected], ids[selected]
    became_mask = int((new == MASK).sum())
    unchanged = int((new == old).sum())
    randomised = n - became_mask - unchanged
    # A random id is [MASK] or the original itself with probability 1/V each.
    _within(became_mask, n, 0.8 + 0.1 / V, "selected tokens that became [MASK]",
            "replace a selected token by [MASK] with probability mask_replace_prob")
    _within(randomised, n, 0.1 * (1 - 2 / V), "selected tokens that became another id",
            "among the selected tokens *not* turned into [MASK], draw 'random' with probability "
            "random_replace_prob / (1 - mask_replace_prob) = 0.5")
    _within(unchanged, n, 0.1 + 0.1 / V, "selected tokens left unchanged",
            "what is neither [MASK] nor random keeps its original id")


def test_random_ids_are_uniform_over_the_vocabulary(submission):
    """Random replacements are ids in [0, vocab_size), spread uniformly (mean (V - 1) / 2)."""
    ids = _batch(6000, seed=8)
    inputs, labels = _mask(submission, ids, seed=9, probs=(0.3, 0.0, 1.0))
    selected = labels != -100
    new = inputs[selected]
    if ((new < 0) | (new >= V)).any():
        raise CheckFailure(f"a random replacement fell outside [0, vocab_size={V})")
    n = new.numel()
    mean_sd = math.sqrt((V**2 - 1) / 12 / n)
    if abs(new.double().mean().item() - (V - 1) / 2) > SIGMAS * mean_sd:
        raise CheckFailure(f"with random_replace_prob=1, the replacements average "
                           f"{new.double().mean().item():.2f}; uniform ids in [0, {V}) average "
                           f"{(V - 1) / 2}: use torch.randint(vocab_size, ...)")
    counts = torch.bincount(new, minlength=V).double()
    if (counts == 0).any():
        raise CheckFailure("some vocabulary ids never appear among ~28,000 random replacements: "
                           "draw them uniformly from the whole vocabulary")


@pytest.mark.pitfall(RANDOM)
def test_other_probabilities(submission):
    """mlm_probability=0.3, mask_replace_prob=0.5, random_replace_prob=0.4 (so 10% unchanged)."""
    ids = _batch(seed=10)
    inputs, labels = _mask(submission, ids, seed=11, probs=(0.3, 0.5, 0.4))
    ordinary = ~torch.isin(ids, torch.tensor(SPECIALS))
    selected = labels != -100
    _within(int(selected.sum()), int(ordinary.sum()), 0.3, "share selected at mlm_probability=0.3",
            "use mlm_probability, not a fixed 0.15")
    n = int(selected.sum())
    new, old = inputs[selected], ids[selected]
    _within(int((new == MASK).sum()), n, 0.5 + 0.4 / V, "[MASK] share at mask_replace_prob=0.5",
            "use mask_replace_prob")
    _within(int((new == old).sum()), n, 0.1 + 0.4 / V, "unchanged share (1 - 0.5 - 0.4)",
            "random_replace_prob / (1 - mask_replace_prob) of the rest become random ids")
    inputs, labels = _mask(submission, ids, seed=12, probs=(0.15, 1.0, 0.0))
    selected = labels != -100
    if not (inputs[selected] == MASK).all():
        raise CheckFailure("with mask_replace_prob=1 every selected token must become [MASK]")


@pytest.mark.property
def test_reproducible_with_a_seed(submission):
    """The same seeded generator gives the same masks; another seed gives others."""
    ids = _batch(200, seed=13)
    first, again, other = (_mask(submission, ids, seed=s) for s in (14, 14, 15))
    if not (torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])):
        raise CheckFailure("two calls with identically seeded generators gave different masks: "
                           "pass generator=generator to every torch.bernoulli and torch.randint")
    if torch.equal(first[1], other[1]):
        raise CheckFailure("two different seeds gave the same masks: draw from the generator")
