"""Hidden checks for Exercise 4: ``shift_right`` and ``EncoderDecoder``.

The student's model gets the weights of a :class:`toolkit.seq2seq.EncoderDecoder` (float64;
norm gains and position biases drawn at random so that every one of them matters) and is
compared with it, which equals Hugging Face's ``T5ForConditionalGeneration`` (tested in the
toolkit's suite): teacher-forced logits and loss on padded inputs, the encoder's memory,
and cached decoding one token at a time.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, assert_equal
from toolkit.seq2seq import EncDecCache, EncDecConfig, EncoderDecoder, shift_right

pytestmark = pytest.mark.grade_cell("test_model")

CONFIG = EncDecConfig(vocab_size=23, d_model=16, n_heads=4, d_head=6, d_ff=32,
                      n_encoder_layers=2, n_decoder_layers=3, num_buckets=8, max_distance=12)

SETUP = """
from toolkit.seq2seq import EncDecConfig as _Config

_model = EncoderDecoder(_Config.from_dict(inputs["config"])).double()
_load_exercise_state(_model, inputs["state"], may_miss=("lm_head.weight",))
_model.eval()
"""


def reference_model(seed: int = 0) -> tuple[EncoderDecoder, dict]:
    torch.manual_seed(seed)
    model = EncoderDecoder(CONFIG).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "relative_attention_bias" in name:
                p.copy_(torch.randn_like(p))
    state = {k: v.detach().clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    return model, state


def batch(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(2, CONFIG.vocab_size, (3, 10), generator=g)
    src[1, 6:] = 0
    src[2, 2:] = 0
    labels = torch.randint(2, CONFIG.vocab_size, (3, 8), generator=g)
    labels[0, 5:] = -100
    labels[2, 7:] = -100
    return src, labels


@pytest.mark.weight(3)
@pytest.mark.pitfall("Encoder-decoder forward differs from T5")
def test_teacher_forcing(submission):
    """Logits and loss of model(src, labels) on padded inputs and labels equal T5's."""
    ref, state = reference_model(1)
    src, labels = batch(2)
    got = submission.run(SETUP + "result = _model(inputs['src'], inputs['labels'])",
                         config=CONFIG.to_dict(), state=state, src=src, labels=labels)
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure("model(src, labels) should return (logits, loss)")
    with torch.no_grad():
        logits, loss = ref(src, labels)
    assert_close(got[0], logits, atol=1e-8, rtol=1e-6, name="logits",
                 hint="the bias once per stack and in every layer; padding masked in the "
                      "encoder and in cross-attention; no causal mask in cross-attention; "
                      "lm_head(h * d_model ** -0.5)")
    assert_close(torch.as_tensor(got[1]).reshape(()), loss, atol=1e-8, rtol=1e-6, name="loss",
                 hint="mean cross-entropy over the labels that are not -100")


@pytest.mark.pitfall("Source padding not masked")
def test_encoder_memory(submission):
    """encode(src) returns the final-normed memory and src_mask = src != pad_id."""
    ref, state = reference_model(3)
    src, _ = batch(4)
    got = submission.run(SETUP + "result = _model.encode(inputs['src'])",
                         config=CONFIG.to_dict(), state=state, src=src)
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure("encode(src) should return (memory, src_mask)")
    with torch.no_grad():
        memory, mask = ref.encode(src)
    assert_equal(got[1], mask, name="src_mask", hint="src != pad_id, True at real tokens")
    real = mask[..., None].expand_as(memory)
    assert_close(got[0][real], memory[real], atol=1e-8, rtol=1e-6, name="memory at real tokens",
                 hint="the encoder's bias once for every layer, the padding mask "
                      "src_mask[:, None, None, :], encoder_norm at the end")


@pytest.mark.weight(2)
@pytest.mark.pitfall("Cached decoding differs from the full decoder")
def test_cached_decode(submission):
    """decode with a cache, two positions then one at a time, equals the reference's logits."""
    ref, state = reference_model(5)
    src, labels = batch(6)
    tgt = shift_right(labels, 0)
    code = SETUP + """
_memory, _mask = _model.encode(inputs["src"])
_cache = _model.new_cache()
_tgt = inputs["tgt"]
_outs = [_model.decode(_tgt[:, :2], _memory, _mask, _cache, start_pos=0)]
_outs += [_model.decode(_tgt[:, t : t + 1], _memory, _mask, _cache, start_pos=t)
          for t in range(2, _tgt.size(1))]
result = (torch.cat(_outs, dim=1), _cache.length)
"""
    got = submission.run(code, config=CONFIG.to_dict(), state=state, src=src, tgt=tgt)
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure("could not read the cached decoder's logits")
    with torch.no_grad():
        memory, mask = ref.encode(src)
        cache = EncDecCache(CONFIG.n_decoder_layers)
        expected = torch.cat([ref.decode(tgt[:, :2], memory, mask, cache, 0)] + [
            ref.decode(tgt[:, t : t + 1], memory, mask, cache, t) for t in range(2, tgt.size(1))
        ], dim=1)
    assert_close(got[0], expected, atol=1e-8, rtol=1e-6, name="logits decoded with the cache",
                 hint="bias(T, T_k, query_offset=start_pos), causal_mask(T, T_k, "
                      "offset=start_pos), T_k = start_pos + T")
    if got[1] != tgt.size(1):
        raise CheckFailure(f"cache.length is {got[1]} after {tgt.size(1)} positions: set it to "
                           "T_k at the end of decode")


@pytest.mark.pitfall("Decoder input not shifted right")
def test_shift_right(submission):
    """shift_right puts the start token first, drops the last label, replaces -100."""
    _, labels = batch(8)
    for start in (0, 3):
        got = submission.call("shift_right", labels, start)
        assert_equal(got, shift_right(labels, start), name=f"shift_right(labels, {start})",
                     hint="[start, y_0 .. y_{T-2}], with -100 replaced by start_id")
