"""Decoding loops: sampling (greedy at ``temperature=0``) and beam search.

* **Greedy**: ``argmax z``. Cheap; tends to loop on repetitive text.
* **Sampling**: draw from the filtered distribution of
  :mod:`toolkit.generate.sampling`, one token per step.
* **Beam search**: keep the ``W`` most probable partial sequences (by summed
  log-probability), extend each by every token, keep the best ``W`` again. A
  finished hypothesis (ended by EOS or by the length limit) is ranked by
  ``sum log p / len^alpha``, the length penalty of Hugging Face's ``generate``
  (``len`` = generated tokens including EOS). ``alpha > 0`` favours longer
  sequences (without it the sum of negative log-probabilities always prefers
  stopping early), ``alpha < 0`` shorter ones. ``W = 1`` is greedy decoding, as
  ``generate(num_beams=1)`` is in Hugging Face. (Run as a beam search, one beam would
  not be: with ``alpha > 0`` it would keep extending the runner-up after EOS won.)

The KV cache (:class:`toolkit.models.StaticKVCache`) makes each step process one token
instead of the whole prefix; ``use_cache=False`` re-runs the full sequence each
step and must produce the same tokens (tested).

Shapes: token ids ``(B, T)``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from toolkit.generate.sampling import _sort_desc, sample_next_token
from toolkit.models import GPT


def _check_generate_args(model: nn.Module, idx: Tensor, max_new_tokens: int) -> None:
    if idx.dim() != 2 or idx.size(1) == 0:
        raise ValueError(f"idx must have shape (B, T) with T >= 1, got {tuple(idx.shape)}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    limit = model.config.max_seq_len
    if idx.size(1) + max_new_tokens > limit:
        raise ValueError(
            f"max_new_tokens: prompt ({idx.size(1)}) + {max_new_tokens} new tokens exceed "
            f"the model's max_seq_len={limit}"
        )


@torch.no_grad()
def generate(
    model: GPT,
    idx: Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    eos_token: int | None = None,
) -> Tensor:
    """Autoregressive decoding by sampling (``temperature=0``: greedy).

    Args:
        model: a :class:`toolkit.models.GPT` (put in eval mode for the call).
        idx: ``(B, T)`` prompt token ids.
        max_new_tokens: tokens to append; prompt + new must fit ``max_seq_len``.
        temperature, top_k, top_p, generator: see :func:`sample_next_token`.
        use_cache: decode with a KV cache (one token per step) or re-run the
            full sequence each step; both give the same tokens.
        eos_token: a row that produced it keeps producing it (padding); decoding
            stops early once every row has.

    Returns:
        ``(B, T + n)`` with ``n <= max_new_tokens`` (``n`` smaller only if every row
        ended with ``eos_token``).
    """
    _check_generate_args(model, idx, max_new_tokens)
    was_training = model.training
    model.eval()
    try:
        cache = model.new_cache() if use_cache else None
        seq = idx
        finished = torch.zeros(idx.size(0), dtype=torch.bool, device=idx.device)
        if max_new_tokens > 0 and use_cache:
            logits, _ = model(idx, cache=cache, start_pos=0)  # prefill: the whole prompt once
        for step in range(max_new_tokens):
            if not use_cache:
                logits, _ = model(seq)  # the whole sequence, every step
            next_token = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)
            if eos_token is not None:
                next_token = next_token.masked_fill(finished, eos_token)
                finished = finished | (next_token == eos_token)
            seq = torch.cat([seq, next_token[:, None]], dim=1)
            if eos_token is not None and bool(finished.all()):
                break
            if use_cache and step + 1 < max_new_tokens:
                pos = seq.size(1) - 1  # absolute position of the token just added
                logits, _ = model(next_token[:, None], cache=cache, start_pos=pos)
        return seq
    finally:
        model.train(was_training)


def greedy(
    model: GPT,
    idx: Tensor,
    max_new_tokens: int,
    use_cache: bool = True,
    eos_token: int | None = None,
) -> Tensor:
    """Greedy decoding: always the most probable next token (see :func:`generate`)."""
    return generate(
        model, idx, max_new_tokens, temperature=0.0, use_cache=use_cache, eos_token=eos_token
    )


def _beam_search_one(
    model: GPT,
    prompt: Tensor,
    beam_width: int,
    max_new_tokens: int,
    length_penalty: float,
    eos_token: int | None,
) -> list[tuple[float, Tensor]]:
    """Beam search for one prompt ``(1, T)``.

    Returns finished hypotheses ``(normalised score, new tokens)``, best first.
    """
    T = prompt.size(1)
    cache = model.new_cache()
    logits, _ = model(prompt, cache=cache, start_pos=0)
    beams = prompt.new_zeros((1, 0))  # (n_beams, generated so far)
    beam_scores = torch.zeros(1, dtype=torch.float64, device=prompt.device)  # sum log p
    finished: list[tuple[float, Tensor]] = []

    def normalised(score: float, length: int) -> float:
        return score / (length**length_penalty)  # HF: sum log p / len^alpha

    for step in range(max_new_tokens):
        logprobs = torch.log_softmax(logits[:, -1].double(), dim=-1)  # (n_beams, V)
        V = logprobs.size(-1)
        candidates = (beam_scores[:, None] + logprobs).flatten()  # (n_beams * V,)
        # 2W candidates guarantee W that do not end, even if W of them are EOS.
        scores, flat = _sort_desc(candidates)
        scores, flat = scores[: 2 * beam_width], flat[: 2 * beam_width]
        length = step + 1
        next_rows, next_tokens, next_scores = [], [], []
        for rank, (score, index) in enumerate(zip(scores.tolist(), flat.tolist())):
            row, token = divmod(index, V)
            if eos_token is not None and token == eos_token:
                if rank < beam_width:  # only an EOS among the W best counts (as in HF)
                    tokens = torch.cat([beams[row], beams.new_tensor([token])])
                    finished.append((normalised(score, length), tokens))
                continue
            next_rows.append(row)
            next_tokens.append(token)
            next_scores.append(score)
            if len(next_rows) == beam_width:
                break
        if not next_rows:  # every candidate ended (tiny vocabularies only)
            beams = beams[:0]
            break
        rows = torch.tensor(next_rows, device=prompt.device)
        new_tokens = torch.tensor(next_tokens, device=prompt.device)
        beams = torch.cat([beams[rows], new_tokens[:, None]], dim=1)
        beam_scores = torch.tensor(next_scores, dtype=torch.float64, device=prompt.device)
        finished.sort(key=lambda h: -h[0])
        del finished[beam_width:]
        if step + 1 == max_new_tokens:
            break
        # Stop when no running beam can still beat the worst kept hypothesis. Log-probs
        # are <= 0, so a beam's sum only falls; its best possible normalised score is
        # at the longest length if alpha > 0, at the current length otherwise.
        if len(finished) == beam_width:
            best_len = max_new_tokens if length_penalty > 0 else length
            if normalised(float(beam_scores.max()), best_len) <= finished[-1][0]:
                beams = beams[:0]  # the running beams are abandoned
                break
        cache.reorder(rows)  # row i continues old beam rows[i]
        logits, _ = model(beams[:, -1:], cache=cache, start_pos=T + length - 1)
    for score, tokens in zip(beam_scores.tolist(), beams):  # beams that hit the length limit
        finished.append((normalised(score, tokens.numel()), tokens))
    finished.sort(key=lambda h: -h[0])
    return finished


@torch.no_grad()
def beam_search(
    model: GPT,
    idx: Tensor,
    beam_width: int,
    max_new_tokens: int,
    length_penalty: float = 1.0,
    eos_token: int | None = None,
) -> Tensor:
    """Beam search with Hugging Face's length penalty ``score = sum log p / len^alpha``.

    Args:
        model: a :class:`toolkit.models.GPT`.
        idx: ``(B, T)`` prompts; each row is searched on its own.
        beam_width: ``W >= 1`` beams (``W = 1`` runs :func:`greedy`).
        max_new_tokens: length limit of the generated part.
        length_penalty: ``alpha``; ``len`` counts generated tokens including EOS.
        eos_token: ends a hypothesis.

    Returns:
        ``(B, T + n)``: each prompt followed by its best hypothesis; rows whose
        hypothesis is shorter than the longest are padded with ``eos_token``.
    """
    _check_generate_args(model, idx, max_new_tokens)
    if not isinstance(beam_width, int) or beam_width < 1:
        raise ValueError(f"beam_width must be an int >= 1, got {beam_width!r}")
    if max_new_tokens == 0:
        return idx
    if beam_width == 1:
        return greedy(model, idx, max_new_tokens, eos_token=eos_token)
    was_training = model.training
    model.eval()
    try:
        best = [
            _beam_search_one(model, idx[b : b + 1], beam_width, max_new_tokens, length_penalty,
                             eos_token)[0][1]
            for b in range(idx.size(0))
        ]
    finally:
        model.train(was_training)
    n = max(t.numel() for t in best)
    pad = 0 if eos_token is None else eos_token  # only EOS-ended rows are short
    rows = [torch.cat([t, t.new_full((n - t.numel(),), pad)]) for t in best]
    return torch.cat([idx, torch.stack(rows)], dim=1)
