"""Hidden checks for Exercise 5: ``greedy_decode``.

The student's ``greedy_decode`` runs the student's ``EncoderDecoder`` with the weights of a
reference :class:`toolkit.seq2seq.EncoderDecoder` whose end-of-sequence token is made
likely, so that rows end at different steps. Its tokens must equal
:func:`toolkit.seq2seq.greedy_decode` on the reference (which equals Hugging Face's
``generate(num_beams=1)``), with and without the cache; a spy checks that cached decoding
feeds one token per step at its absolute position.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_equal
from toolkit.seq2seq import EncDecConfig, EncoderDecoder, greedy_decode

pytestmark = pytest.mark.grade_cell("test_greedy")

CONFIG = EncDecConfig(vocab_size=23, d_model=16, n_heads=4, d_ff=32, num_buckets=8,
                      max_distance=12)

RUN = """
from toolkit.seq2seq import EncDecConfig as _Config

_model = EncoderDecoder(_Config.from_dict(inputs["config"])).double()
_load_exercise_state(_model, inputs["state"], may_miss=("lm_head.weight",))
_model.eval()
_calls = []
_decode = _model.decode
def _spy(tgt, *args, **kwargs):
    _start = kwargs.get("start_pos", args[3] if len(args) > 3 else 0)
    _calls.append((int(tgt.size(1)), int(_start)))
    return _decode(tgt, *args, **kwargs)
_model.decode = _spy
_out = greedy_decode(_model, inputs["src"], inputs["n"], use_cache=inputs["use_cache"])
result = (_out, tuple(_calls))
"""


def reference(seed: int) -> tuple[EncoderDecoder, dict]:
    torch.manual_seed(seed)
    model = EncoderDecoder(CONFIG).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "relative_attention_bias" in name:
                p.copy_(torch.randn_like(p))
        model.embed.weight[1] *= 2.5  # </s> likely: rows end at different steps
    state = {k: v.detach().clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    return model, state


def _src(seed: int) -> torch.Tensor:
    src = torch.randint(2, 23, (5, 8), generator=torch.Generator().manual_seed(seed))
    src[1, 5:] = 0
    src[3, 2:] = 0
    return src


def _decode(submission, state, src, n, use_cache):
    got = submission.run(RUN, config=CONFIG.to_dict(), state=state, src=src, n=n,
                         use_cache=use_cache)
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure("could not read greedy_decode's output")
    return got


@pytest.mark.weight(2)
@pytest.mark.pitfall("Hypotheses keep growing after EOS")
def test_matches_reference(submission):
    """Cached greedy decoding gives the reference's tokens, pad after each row's </s>."""
    for seed in (0, 1, 2):
        ref, state = reference(seed)
        src = _src(seed + 10)
        got, _ = _decode(submission, state, src, 12, True)
        with torch.no_grad():
            expected = greedy_decode(ref, src, 12)
        assert_equal(got, expected, name=f"greedy_decode (model {seed})",
                     hint="after a row's eos_id it only gets pad_id; stop once every row has "
                          "finished; return the tokens without the start token")


@pytest.mark.pitfall("Cached decoding re-runs the whole target")
def test_uncached_and_one_token_per_step(submission):
    """Uncached decoding agrees, and the cached one decodes one token per step at step t."""
    ref, state = reference(3)
    src = _src(13)
    cached, calls = _decode(submission, state, src, 9, True)
    uncached, _ = _decode(submission, state, src, 9, False)
    with torch.no_grad():
        expected = greedy_decode(ref, src, 9)
    assert_equal(uncached, expected, name="greedy_decode(use_cache=False)",
                 hint="without a cache, decode the whole target every step")
    assert_equal(cached, expected, name="greedy_decode(use_cache=True)")
    want = tuple((1, t) for t in range(len(calls)))
    if tuple(calls) != want:
        raise CheckFailure(f"with the cache, decode was called with (tokens, start_pos) "
                           f"{list(calls)[:6]}, expected one token per step at start_pos = "
                           f"step: {list(want)[:6]}")
