"""Decoding an encoder-decoder: greedy and beam search, with both caches.

The input is encoded **once**; every step then runs the decoder on the newest token
only, reading the earlier target tokens from the self-attention cache and the encoder
output from the cross-attention cache, whose keys and values were projected on the
first step (:class:`toolkit.seq2seq.EncDecCache`). ``use_cache=False`` re-runs the
decoder on the whole target so far and gives the same tokens (tested).

The decoder starts from ``pad_id`` (T5's start token); the returned tokens leave it out.
A row that has produced ``eos_id`` is finished: it gets ``pad_id`` from then on (Hugging
Face's ``generate`` does the same), and decoding stops once every row is finished.

**Beam search** keeps the ``W`` best partial targets by summed log-probability. Each step
ranks the ``2W`` best one-token extensions of all beams (``2W``, so that ``W`` remain
even if ``W`` of them end). An extension among the ``W`` best that ends (``eos_id``, or
the length limit) becomes a *finished hypothesis* scored ``sum log p / len^alpha``
(``len`` = generated tokens including EOS; Hugging Face's ``length_penalty``), and the
``W`` best finished ones are kept; the ``W`` best extensions that do not end are the next
beams, and the caches are reordered to follow their parents. The search stops, as
Hugging Face's default ``early_stopping=False`` does, once ``W`` hypotheses are finished
and the best running beam, normalised at its current length, scores no better than the
worst of them. ``W = 1`` is greedy decoding.
"""

from __future__ import annotations

import torch
from torch import Tensor

from toolkit.arguments import check_int
from toolkit.seq2seq.model import EncoderDecoder


@torch.no_grad()
def greedy_decode(
    model: EncoderDecoder, src: Tensor, max_new_tokens: int, use_cache: bool = True
) -> Tensor:
    """The most probable token at every step, for a batch of inputs.

    Args:
        model: an :class:`EncoderDecoder` (used as it is; put it in eval mode first).
        src: ``(B, S)`` input ids, padded with ``pad_id``.
        max_new_tokens: at most this many tokens per row.
        use_cache: one token per step with an :class:`EncDecCache`, or the whole target
            every step; the same tokens either way.

    Returns:
        ``(B, n)`` generated ids, ``n <= max_new_tokens`` (fewer only when every row
        produced ``eos_id``); after its EOS a row holds ``pad_id``.
    """
    pad, eos = model.config.pad_id, model.config.eos_id
    memory, src_mask = model.encode(src)  # once per input
    cache = model.new_cache() if use_cache else None
    tgt = src.new_full((src.size(0), 1), pad)  # (B, 1): the start token
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for step in range(max_new_tokens):
        if use_cache:  # the newest token only, at absolute position `step`
            logits = model.decode(tgt[:, -1:], memory, src_mask, cache, start_pos=step)
        else:
            logits = model.decode(tgt, memory, src_mask)  # the whole target again
        next_token = logits[:, -1].argmax(dim=-1)  # (B,)
        next_token = next_token.masked_fill(finished, pad)  # a finished row only pads
        finished = finished | (next_token == eos)
        tgt = torch.cat([tgt, next_token[:, None]], dim=1)
        if bool(finished.all()):
            break
    return tgt[:, 1:]


@torch.no_grad()
def beam_search_one(
    model: EncoderDecoder,
    src: Tensor,
    beam_width: int,
    max_new_tokens: int,
    length_penalty: float = 1.0,
    use_cache: bool = True,
) -> list[tuple[float, Tensor]]:
    """Beam search for one input ``src`` ``(1, S)``.

    Returns:
        at most ``beam_width`` finished hypotheses ``(score, tokens)``, best first:
        ``score = sum log p / len^length_penalty`` (a float), ``tokens`` ``(len,)`` the
        generated ids, EOS included when the hypothesis ended with it.
    """
    pad, eos = model.config.pad_id, model.config.eos_id
    memory, src_mask = model.encode(src)  # (1, S, d), once
    cache = model.new_cache() if use_cache else None
    beams = src.new_full((1, 1), pad)  # (n_beams, 1 + generated): the start token
    scores = torch.zeros(1, dtype=torch.float64, device=src.device)  # sum log p per beam
    finished: list[tuple[float, Tensor]] = []
    for step in range(max_new_tokens):
        n = beams.size(0)
        if use_cache:  # the cache holds each beam's earlier positions, in beam order
            logits = model.decode(beams[:, -1:], memory.expand(n, -1, -1),
                                  src_mask.expand(n, -1), cache, start_pos=step)
        else:
            logits = model.decode(beams, memory.expand(n, -1, -1), src_mask.expand(n, -1))
        logprobs = torch.log_softmax(logits[:, -1].double(), dim=-1)  # (n, V)
        V = logprobs.size(-1)
        candidates = (scores[:, None] + logprobs).flatten()  # (n * V,) sum log p
        top, index = torch.topk(candidates, min(2 * beam_width, candidates.numel()))
        parents, tokens = index // V, index % V  # which beam, which token
        length = step + 1  # generated tokens, EOS included
        ends = (tokens == eos) | (length == max_new_tokens)
        for rank in range(min(beam_width, top.numel())):  # only the W best may finish
            if ends[rank]:
                hypothesis = torch.cat([beams[parents[rank], 1:], tokens[rank : rank + 1]])
                finished.append((float(top[rank]) / length**length_penalty, hypothesis))
        finished.sort(key=lambda h: -h[0])
        del finished[beam_width:]
        going = (~ends).nonzero().flatten()[:beam_width]  # the W best that do not end
        if going.numel() == 0:
            break
        beams = torch.cat([beams[parents[going]], tokens[going, None]], dim=1)
        scores = top[going]
        if cache is not None:
            cache.reorder(parents[going])  # row i continues beam parents[going[i]]
        if len(finished) == beam_width and (
            float(scores.max()) / length**length_penalty <= finished[-1][0]
        ):
            break  # no running beam is likely to beat the worst kept hypothesis
    return finished


@torch.no_grad()
def beam_decode(
    model: EncoderDecoder,
    src: Tensor,
    beam_width: int,
    max_new_tokens: int,
    length_penalty: float = 1.0,
    num_return_sequences: int = 1,
    use_cache: bool = True,
) -> tuple[Tensor, Tensor]:
    """Beam search for each input, Hugging Face's ``generate(num_beams=W)`` without sampling.

    Args:
        model: an :class:`EncoderDecoder` (in eval mode).
        src: ``(B, S)`` input ids, padded with ``pad_id``; each row is searched on its own.
        beam_width: ``W >= 1``.
        max_new_tokens: length limit of a hypothesis (EOS included).
        length_penalty: ``alpha`` in ``sum log p / len^alpha``.
        num_return_sequences: ``R <= W`` best hypotheses per input.
        use_cache: as in :func:`greedy_decode`.

    Returns:
        ``tokens`` ``(B, R, n)`` (each hypothesis, EOS included, then ``pad_id``) and
        ``scores`` ``(B, R)`` float64 normalised scores, best first.
    """
    check_int("beam_width", beam_width)
    check_int("max_new_tokens", max_new_tokens)
    check_int("num_return_sequences", num_return_sequences)
    if num_return_sequences > beam_width:
        raise ValueError(f"num_return_sequences={num_return_sequences} > beam_width={beam_width}")
    best = [beam_search_one(model, src[b : b + 1], beam_width, max_new_tokens, length_penalty,
                             use_cache)[:num_return_sequences] for b in range(src.size(0))]
    n = max(t.numel() for hyps in best for _, t in hyps)
    pad = model.config.pad_id
    tokens = torch.stack([torch.stack([torch.cat([t, t.new_full((n - t.numel(),), pad)])
                                       for _, t in hyps]) for hyps in best])
    scores = torch.tensor([[s for s, _ in hyps] for hyps in best], dtype=torch.float64)
    return tokens, scores
