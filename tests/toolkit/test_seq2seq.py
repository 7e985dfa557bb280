"""toolkit.seq2seq: the T5-style encoder-decoder against Hugging Face's T5, and its decoding.

Hugging Face's ``T5ForConditionalGeneration`` is built from a tiny ``T5Config`` (no
download), its weights copied into ours; logits, loss, greedy and beam search must agree.
"""

from __future__ import annotations

import pytest
import torch

from toolkit.position import t5_relative_position_bucket
from toolkit.seq2seq import (
    EncDecCache,
    EncDecConfig,
    EncoderDecoder,
    beam_decode,
    greedy_decode,
    shift_right,
)
from toolkit.seq2seq.decoding import beam_search_one

transformers = pytest.importorskip("transformers")

V = 23


def hf_names(config: EncDecConfig) -> dict[str, str]:
    """Our parameter name -> Hugging Face T5's."""
    names = {"embed.weight": "shared.weight",
             "encoder_bias.relative_attention_bias.weight":
                 "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
             "decoder_bias.relative_attention_bias.weight":
                 "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
             "encoder_norm.weight": "encoder.final_layer_norm.weight",
             "decoder_norm.weight": "decoder.final_layer_norm.weight"}
    proj = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o"}
    for i in range(config.n_encoder_layers):
        ours, theirs = f"encoder_layers.{i}", f"encoder.block.{i}.layer"
        for p, q in proj.items():
            names[f"{ours}.self_attn.{p}.weight"] = f"{theirs}.0.SelfAttention.{q}.weight"
        names[f"{ours}.norm1.weight"] = f"{theirs}.0.layer_norm.weight"
        names[f"{ours}.ff.fc1.weight"] = f"{theirs}.1.DenseReluDense.wi.weight"
        names[f"{ours}.ff.fc2.weight"] = f"{theirs}.1.DenseReluDense.wo.weight"
        names[f"{ours}.norm2.weight"] = f"{theirs}.1.layer_norm.weight"
    for i in range(config.n_decoder_layers):
        ours, theirs = f"decoder_layers.{i}", f"decoder.block.{i}.layer"
        for p, q in proj.items():
            names[f"{ours}.self_attn.{p}.weight"] = f"{theirs}.0.SelfAttention.{q}.weight"
            names[f"{ours}.cross_attn.{p}.weight"] = f"{theirs}.1.EncDecAttention.{q}.weight"
        names[f"{ours}.norm1.weight"] = f"{theirs}.0.layer_norm.weight"
        names[f"{ours}.norm2.weight"] = f"{theirs}.1.layer_norm.weight"
        names[f"{ours}.ff.fc1.weight"] = f"{theirs}.2.DenseReluDense.wi.weight"
        names[f"{ours}.ff.fc2.weight"] = f"{theirs}.2.DenseReluDense.wo.weight"
        names[f"{ours}.norm3.weight"] = f"{theirs}.2.layer_norm.weight"
    return names


def pair(seed=0, **overrides):
    """A tiny HF T5 (float64, random norms and biases) and our model with its weights."""
    settings = dict(vocab_size=V, d_model=16, n_heads=4, d_head=6, d_ff=32, n_encoder_layers=2,
                    n_decoder_layers=3, num_buckets=8, max_distance=12)
    settings.update(overrides)
    config = EncDecConfig(**settings)
    hf_config = transformers.T5Config(
        vocab_size=V, d_model=config.d_model, d_kv=config.d_head, d_ff=config.d_ff,
        num_layers=config.n_encoder_layers, num_decoder_layers=config.n_decoder_layers,
        num_heads=config.n_heads, relative_attention_num_buckets=config.num_buckets,
        relative_attention_max_distance=config.max_distance, dropout_rate=0.0,
        feed_forward_proj="relu", layer_norm_epsilon=config.eps, pad_token_id=0,
        eos_token_id=1, decoder_start_token_id=0)
    torch.manual_seed(seed)
    hf = transformers.T5ForConditionalGeneration(hf_config).double().eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "layer_norm" in name or "relative_attention_bias" in name:
                p.copy_(torch.randn_like(p))  # not the ones and small values of the init
    ours = EncoderDecoder(config).double().eval()
    state = hf.state_dict()
    ours.load_state_dict({k: state[v] for k, v in hf_names(config).items()} |
                         {"lm_head.weight": state["shared.weight"]})
    return hf, ours


def batch(seed=1, B=3, S=9, T=7):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(2, V, (B, S), generator=g)
    src[1, 6:] = 0  # padded inputs
    src[2, 3:] = 0
    labels = torch.randint(2, V, (B, T), generator=g)
    labels[0, 5:] = -100  # padded targets
    return src, labels


def test_buckets_equal_hf():
    rel = torch.arange(-300, 301)
    for bidirectional in (True, False):
        for n, d in ((32, 128), (8, 12), (16, 40)):
            theirs = transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket(
                rel, bidirectional=bidirectional, num_buckets=n, max_distance=d)
            ours = t5_relative_position_bucket(rel, bidirectional, n, d)
            assert torch.equal(ours, theirs), (bidirectional, n, d)


def test_logits_and_loss_equal_hf():
    hf, ours = pair()
    src, labels = batch()
    with torch.no_grad():
        out = hf(input_ids=src, attention_mask=(src != 0).long(), labels=labels)
        logits, loss = ours(src, labels)
    # HF's T5LayerNorm takes mean(x^2) in float32 even for a float64 model: float32 rounding.
    torch.testing.assert_close(logits, out.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(loss, out.loss, rtol=1e-5, atol=1e-5)


def test_shift_right_equals_hf():
    hf, _ = pair()
    _, labels = batch()
    assert torch.equal(shift_right(labels, 0), hf._shift_right(labels))


def test_head_is_tied_and_bias_shared():
    _, ours = pair()
    assert ours.lm_head.weight is ours.embed.weight
    names = [n for n, _ in ours.named_parameters() if "relative_attention_bias" in n]
    assert names == ["encoder_bias.relative_attention_bias.weight",
                     "decoder_bias.relative_attention_bias.weight"]


def test_padding_is_invisible():
    """Changing the padded tail of an input changes nothing (encoder and cross-attention)."""
    _, ours = pair()
    src, labels = batch()
    other = src.clone()
    memory, mask = ours.encode(src)
    with torch.no_grad():
        a, _ = ours(src, labels)
        other[1, 6:] = 0
        other = torch.cat([other, torch.zeros(3, 4, dtype=torch.long)], dim=1)  # more padding
        b, _ = ours(other, labels)
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert mask.tolist()[2] == [True] * 3 + [False] * 6


def test_decoder_is_causal():
    _, ours = pair()
    src, labels = batch()
    changed = labels.clone()
    changed[:, 4:] = 5
    with torch.no_grad():
        a, _ = ours(src, labels)
        b, _ = ours(src, changed)
    torch.testing.assert_close(a[:, :5], b[:, :5], rtol=1e-10, atol=1e-10)


def test_cached_decoding_equals_recomputation():
    _, ours = pair()
    src, _ = batch()
    fast = greedy_decode(ours, src, 12)
    slow = greedy_decode(ours, src, 12, use_cache=False)
    assert torch.equal(fast, slow)
    memory, mask = ours.encode(src)
    tgt = torch.randint(2, V, (3, 6), generator=torch.Generator().manual_seed(5))
    cache = EncDecCache(ours.config.n_decoder_layers)
    steps = [ours.decode(tgt[:, :2], memory, mask, cache, 0)]
    steps += [ours.decode(tgt[:, t : t + 1], memory, mask, cache, t) for t in range(2, 6)]
    torch.testing.assert_close(torch.cat(steps, 1), ours.decode(tgt, memory, mask),
                               rtol=1e-10, atol=1e-10)
    assert cache.length == 6 and cache.self_keys[0].shape[2] == 6


def test_cross_keys_projected_once(monkeypatch):
    _, ours = pair()
    src, _ = batch()
    calls = []
    for layer in ours.decoder_layers:
        layer.cross_attn.k_proj.register_forward_hook(lambda *_: calls.append(1))
    greedy_decode(ours, src, 6)
    assert len(calls) == ours.config.n_decoder_layers


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_equals_hf(seed):
    hf, ours = pair(seed, n_decoder_layers=2)  # HF's generate sizes its cache by num_layers
    _eos_heavy(ours)
    with torch.no_grad():
        hf.shared.weight.copy_(ours.embed.weight)
    src, _ = batch(seed + 10)
    # pad_token_id given: without it generate pads finished rows with EOS (its fallback)
    theirs = hf.generate(input_ids=src, attention_mask=(src != 0).long(), max_new_tokens=10,
                         do_sample=False, num_beams=1, pad_token_id=0)
    got = greedy_decode(ours, src, 10)
    assert torch.equal(got, theirs[:, 1:])  # theirs starts with the decoder start token


def _eos_heavy(ours):
    """Make EOS likely enough that hypotheses end at different lengths."""
    with torch.no_grad():
        ours.embed.weight[1] *= 2.5


@pytest.mark.parametrize("seed, width, alpha", [(0, 3, 1.0), (1, 4, 0.0), (2, 3, 2.0),
                                                (3, 5, -1.0), (4, 2, 0.5)])
def test_beam_search_equals_hf(seed, width, alpha):
    hf, ours = pair(seed, n_decoder_layers=2)
    _eos_heavy(ours)
    with torch.no_grad():
        hf.shared.weight.copy_(ours.embed.weight)
    src, _ = batch(seed + 20)
    out = hf.generate(input_ids=src, attention_mask=(src != 0).long(), max_new_tokens=8,
                      do_sample=False, num_beams=width, num_return_sequences=width,
                      length_penalty=alpha, return_dict_in_generate=True, output_scores=True,
                      pad_token_id=0)
    tokens, scores = beam_decode(ours, src, width, 8, alpha, num_return_sequences=width)
    theirs = out.sequences[:, 1:].view(3, width, -1)
    # HF's beam search fills what follows EOS with `pad_token_id or eos_token_id`, EOS when
    # the pad id is 0 (falsy); ours (and HF's greedy) fill with the pad id.
    after_eos = (theirs == 1).long().cumsum(-1) - (theirs == 1).long() > 0
    theirs = theirs.masked_fill(after_eos, 0)
    assert tokens.shape == theirs.shape
    assert torch.equal(tokens, theirs)
    torch.testing.assert_close(scores.flatten(), out.sequences_scores.double(),
                               rtol=1e-5, atol=1e-5)


def test_beams_sorted_and_width_one_is_greedy():
    _, ours = pair(3)
    _eos_heavy(ours)
    src, _ = batch(7)
    tokens, scores = beam_decode(ours, src, 4, 9, 1.0, num_return_sequences=4)
    assert torch.all(scores[:, :-1] >= scores[:, 1:])
    one, _ = beam_decode(ours, src, 1, 9)
    greedy = greedy_decode(ours, src, 9)
    assert torch.equal(one[:, 0, : greedy.size(1)], greedy)
    slow, slow_scores = beam_decode(ours, src, 4, 9, 1.0, 4, use_cache=False)
    assert torch.equal(slow, tokens)
    torch.testing.assert_close(slow_scores, scores)


@torch.no_grad()
def test_hypothesis_scores_are_normalised_log_probs():
    """Each returned score is sum log p(tokens | src) / len^alpha, recomputed by teacher forcing."""
    _, ours = pair(4)
    _eos_heavy(ours)
    src, _ = batch(8)
    for alpha in (0.0, 1.0, 2.0):
        hyps = beam_search_one(ours, src[:1], 3, 8, alpha, True)
        for score, tokens in hyps:
            labels = tokens[None]
            memory, mask = ours.encode(src[:1])
            logits = ours.decode(shift_right(labels), memory, mask)
            logp = torch.log_softmax(logits.double(), -1)[0].gather(1, tokens[:, None]).sum()
            assert score == pytest.approx(float(logp) / tokens.numel() ** alpha, rel=1e-9)


def test_arguments_are_checked():
    _, ours = pair()
    src, _ = batch()
    with pytest.raises(ValueError, match="num_return_sequences"):
        beam_decode(ours, src, 2, 5, num_return_sequences=3)
    with pytest.raises(ValueError):
        EncDecConfig(vocab_size=10, d_model=10, n_heads=3)


def test_number_words():
    from toolkit.seq2seq import number_to_words
    assert number_to_words(0) == "zero"
    assert number_to_words(13) == "thirteen"
    assert number_to_words(4213) == "four thousand two hundred thirteen"
    assert number_to_words(9019) == "nine thousand nineteen"
    assert number_to_words(110) == "one hundred ten"
    assert number_to_words(999_999) == ("nine hundred ninety nine thousand nine hundred "
                                        "ninety nine")
    with pytest.raises(ValueError):
        number_to_words(1_000_000)


def test_number_task_split_and_tokenizer():
    from toolkit.seq2seq import (
        NumberTokenizer,
        encode_batch,
        exact_match,
        is_held_out,
        number_examples,
    )
    tok = NumberTokenizer()
    train = number_examples(2000, held_out=False, seed=1)
    test = number_examples(300, held_out=True, seed=2)

    def number(pair):
        source, target = pair
        return int(source.split()[1]) if source.startswith("words:") else int(target)

    assert not {number(p) for p in train} & {number(p) for p in test}
    assert all(is_held_out(number(p)) for p in test)
    assert 0.08 < sum(map(is_held_out, range(10_000))) / 10_000 < 0.12
    assert {s.split()[0] for s, _ in train} == {"words:", "digits:"}
    for source, target in train[:50]:
        assert tok.decode(tok.encode(target)) == target
        assert tok.encode(source)[-1] == tok.eos_id and tok.unk_id not in tok.encode(source)
    src, labels = encode_batch(test[:5], tok)
    assert src.shape[0] == labels.shape[0] == 5 and (labels == -100).any()
    targets = [torch.tensor(tok.encode(t)) for _, t in test[:5]]
    perfect = torch.nn.utils.rnn.pad_sequence(targets, batch_first=True)
    assert exact_match(lambda s, n: perfect, test[:5], tok) == 1.0
    assert exact_match(lambda s, n: perfect[:, :1], test[:5], tok) < 1.0
