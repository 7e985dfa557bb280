"""Hidden checks for Exercise 6: ``beam_search_one``.

The student's beam search (through the notebook's given ``beam_decode``) runs the student's
``EncoderDecoder`` with the weights of a reference :class:`toolkit.seq2seq.EncoderDecoder`
whose end-of-sequence token is made likely, so that hypotheses end at different lengths.
Its hypotheses and scores must equal :func:`toolkit.seq2seq.beam_decode`'s on the reference
(which equals Hugging Face's ``generate(num_beams=W, do_sample=False)``, tested in the
toolkit's suite) for several widths and length penalties.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, assert_equal
from toolkit.seq2seq import EncDecConfig, EncoderDecoder, beam_decode

pytestmark = pytest.mark.grade_cell("test_beam")

CONFIG = EncDecConfig(vocab_size=23, d_model=16, n_heads=4, d_ff=32, num_buckets=8,
                      max_distance=12)

RUN = """
from toolkit.seq2seq import EncDecConfig as _Config

_model = EncoderDecoder(_Config.from_dict(inputs["config"])).double()
_load_exercise_state(_model, inputs["state"], may_miss=("lm_head.weight",))
_model.eval()
result = tuple(beam_decode(_model, inputs["src"], _w, inputs["n"], _alpha, _r,
                           use_cache=inputs["use_cache"])
               for _w, _alpha, _r in inputs["settings"])
"""


def reference(seed: int) -> tuple[EncoderDecoder, dict]:
    torch.manual_seed(seed)
    model = EncoderDecoder(CONFIG).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "relative_attention_bias" in name:
                p.copy_(torch.randn_like(p))
        model.embed.weight[1] *= 2.5  # </s> likely: hypotheses of several lengths
    state = {k: v.detach().clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    return model, state


def _src(seed: int) -> torch.Tensor:
    src = torch.randint(2, 23, (3, 8), generator=torch.Generator().manual_seed(seed))
    src[1, 4:] = 0
    return src


def _compare(submission, seed, settings, use_cache=True, hint=""):
    ref, state = reference(seed)
    src = _src(seed + 20)
    got = submission.run(RUN, config=CONFIG.to_dict(), state=state, src=src, n=8,
                         settings=settings, use_cache=use_cache)
    if not isinstance(got, tuple) or len(got) != len(settings):
        raise CheckFailure("could not read beam_decode's output")
    for (tokens, scores), (width, alpha, r) in zip(got, settings):
        with torch.no_grad():
            want_tokens, want_scores = beam_decode(ref, src, width, 8, alpha, r)
        what = f"beam search (width {width}, length_penalty {alpha}, {r} returned)"
        assert_equal(tokens, want_tokens, name=f"hypotheses of the {what}", hint=hint)
        assert_close(scores, want_scores, atol=1e-9, rtol=1e-7, name=f"scores of the {what}",
                     hint=hint)


@pytest.mark.weight(2)
@pytest.mark.pitfall("Beams not reordered with their caches")
def test_matches_reference(submission):
    """Hypotheses and scores equal the reference's, every beam returned, with the cache."""
    for seed in (0, 1):
        _compare(submission, seed, ((3, 1.0, 3), (4, 1.0, 2)),
                 hint="rank the 2W best candidates with torch.topk; reorder the cache with the "
                      "new beams' parents: cache.reorder(parents)")


@pytest.mark.pitfall("Length penalty not applied")
def test_length_penalty(submission):
    """Finished hypotheses are scored sum log p / len^alpha, for alpha of 2, 0.5 and -1."""
    _compare(submission, 2, ((3, 2.0, 3), (4, 0.5, 4), (3, -1.0, 3)),
             hint="score = sum log p / len ** length_penalty, len = generated tokens with EOS")


@pytest.mark.pitfall("Beam search without the cache differs")
def test_without_cache(submission):
    """use_cache=False (the whole target every step) gives the same hypotheses."""
    _compare(submission, 3, ((4, 1.0, 4),), use_cache=False,
             hint="without a cache, decode every beam's whole target")
