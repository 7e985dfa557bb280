"""Hidden checks for Exercise 4 (spot the bug): ``BertEmbeddings``.

The circulating code adds a fixed sinusoidal table and no segment embeddings. BERT sums
three *learned* tables (word, position, segment), then LayerNorm and dropout, with Hugging
Face's names. The student's module is loaded with the weights of
:class:`toolkit.bert.BertEmbeddings` (itself tested against Hugging Face's) and compared.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor, expect_value_error
from autograder.protocol.trusted import ForbiddenShortcut, SubmissionError
from toolkit.bert import BertEmbeddings

pytestmark = pytest.mark.grade_cell("test_bert_embeddings")

SINUS = "BERT with fixed sinusoidal positions instead of a learned table"
SEGMENTS = "Segment (token type) embeddings not added"
OFF_BY_ONE = "Position ids counted from 1 (off by one)"
V, D, MAX_LEN = 40, 8, 12
INIT = {"vocab_size": V, "d_model": D, "max_seq_len": MAX_LEN}
TOL = dict(atol=2e-5, rtol=1e-4)

# In the student's kernel: how each parameter of the freshly built module is stored.
PARAMETERS = """
_m = BertEmbeddings(*inputs["args"])
result = {n: (tuple(p.shape), bool(p.requires_grad)) for n, p in _m.named_parameters()}
"""


def _reference(seed=0):
    torch.manual_seed(seed)
    module = BertEmbeddings(V, D, MAX_LEN).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        module.LayerNorm.weight.copy_(1 + 0.3 * torch.randn(D, generator=g))
        module.LayerNorm.bias.copy_(0.3 * torch.randn(D, generator=g))
    return module


def _state(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _refuse_positions_from_one(got, module, ids, types):
    """Fail with the off-by-one's own hint when ``got`` is what ``module`` gives with
    position ids 1..T (checked only where those ids fit in the table)."""
    T = ids.size(1)
    if T + 1 > module.position_embeddings.num_embeddings:
        return
    with torch.no_grad():
        shifted = module.LayerNorm(module.word_embeddings(ids)
                                   + module.position_embeddings.weight[1:T + 1]
                                   + module.token_type_embeddings(types))
    if torch.allclose(got, shifted, **TOL):
        raise CheckFailure("token t got row t + 1 of the position table: the position ids "
                           "start at 1. The first token is position 0 (torch.arange(T))")


def _module_or_hint(submission, ids, *args, **kwargs):
    """``submission.module("BertEmbeddings", ids, ...)``, turning an index error on an input
    of exactly max_seq_len tokens into the hint it almost always means."""
    try:
        return submission.module("BertEmbeddings", ids, *args, **kwargs)
    except ForbiddenShortcut:
        raise
    except SubmissionError as exc:
        if "index out of range" in str(exc) and ids.size(1) == MAX_LEN:
            raise CheckFailure(
                f"an input of exactly max_seq_len={MAX_LEN} tokens failed with an index error "
                f"({exc}). The position ids must be 0, 1, ..., T-1: ids that start at 1 "
                "reach one row past the end of the table") from None
        raise


def _ids(seed, b=3, t=MAX_LEN):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (b, t), generator=g), torch.randint(0, 2, (b, t), generator=g)


@pytest.mark.weight(3)
@pytest.mark.pitfall(SEGMENTS)
def test_matches_reference(submission):
    """With loaded weights: LN(word[ids] + position[0..T-1] + segment[types])."""
    ref = _reference(1)
    ids, types = _ids(2)
    got = _module_or_hint(submission, ids, types, init=INIT, state=_state(ref))
    expect_tensor(got, shape=(3, MAX_LEN, D), name="BertEmbeddings(ids, types)")
    with torch.no_grad():
        expected = ref(ids, types)
        no_segments = ref.LayerNorm(ref.word_embeddings(ids)
                                    + ref.position_embeddings.weight[:MAX_LEN])
    if torch.allclose(got, no_segments, **TOL):
        raise CheckFailure("token_type_ids change nothing: add "
                           "token_type_embeddings(token_type_ids), BERT's segment A / B table")
    assert_close(got, expected, **TOL, name="BertEmbeddings(ids, token_type_ids)",
                 hint="LayerNorm(word_embeddings(ids) + position_embeddings(arange(T)) + "
                      "token_type_embeddings(types)), then dropout")


@pytest.mark.weight(2)
@pytest.mark.pitfall(SINUS)
@pytest.mark.structural
def test_positions_are_a_learned_table(submission):
    """position_embeddings is a trainable (max_seq_len, d) Parameter, not a fixed sinusoid."""
    got = submission.run(PARAMETERS, args=[V, D, MAX_LEN])
    if not isinstance(got, dict):
        raise CheckFailure("could not read the parameters of your BertEmbeddings")
    entry = got.get("position_embeddings.weight")
    if entry is None:
        raise CheckFailure("BertEmbeddings has no position_embeddings.weight parameter: BERT "
                           "learns one vector per position (nn.Embedding(max_seq_len, d_model)); "
                           "a fixed sinusoidal buffer is the Transformer paper's choice, not "
                           "BERT's")
    shape, trainable = entry
    if tuple(shape) != (MAX_LEN, D) or not trainable:
        raise CheckFailure(f"position_embeddings.weight is {tuple(shape)}, trainable={trainable}: "
                           f"it must be a trainable ({MAX_LEN}, {D}) table. A frozen sinusoidal "
                           "table (nn.Embedding.from_pretrained) is not BERT's")
    for name, expected in (("word_embeddings.weight", (V, D)),
                           ("token_type_embeddings.weight", (2, D))):
        if got.get(name, (None, None))[0] != expected:
            raise CheckFailure(f"{name} should be a ({expected[0]}, {expected[1]}) parameter")


@pytest.mark.pitfall(SEGMENTS)
def test_default_segment_is_a(submission):
    """token_type_ids=None means segment A (0) everywhere."""
    ref = _reference(3)
    ids, _ = _ids(4, b=2, t=7)
    got = submission.module("BertEmbeddings", ids, init=INIT, state=_state(ref))
    expect_tensor(got, shape=(2, 7, D), name="BertEmbeddings(ids)")
    _refuse_positions_from_one(got, ref, ids, torch.zeros_like(ids))
    with torch.no_grad():
        assert_close(got, ref(ids, torch.zeros_like(ids)), **TOL, name="BertEmbeddings(ids)",
                     hint="token_type_ids=None: use torch.zeros_like(input_ids)")


@pytest.mark.pitfall(OFF_BY_ONE)
def test_positions_matter(submission):
    """The same token at two positions gets two different vectors (shorter inputs too)."""
    ref = _reference(5)
    ids = torch.full((1, 5), 7)
    got = submission.module("BertEmbeddings", ids, torch.zeros_like(ids), init=INIT,
                            state=_state(ref))
    expect_tensor(got, shape=(1, 5, D), name="BertEmbeddings on five copies of one token")
    if torch.allclose(got[0, 0], got[0, 1], atol=1e-6):
        raise CheckFailure("five copies of one token gave identical vectors: add "
                           "position_embeddings(arange(T)) to the word embeddings")
    _refuse_positions_from_one(got, ref, ids, torch.zeros_like(ids))
    with torch.no_grad():
        assert_close(got, ref(ids, torch.zeros_like(ids)), **TOL, name="BertEmbeddings(ids)")


@pytest.mark.structural
def test_too_long_input_raises(submission):
    """An input longer than max_seq_len raises ValueError (no row in the position table)."""
    ids = torch.zeros(1, MAX_LEN + 1, dtype=torch.long)
    too_long = f"an input of {MAX_LEN + 1} positions with max_seq_len={MAX_LEN}"
    with expect_value_error(too_long, f"{too_long} was accepted: raise ValueError saying the "
                                      "position table is too short"):
        submission.module("BertEmbeddings", ids, init=INIT)
