"""Multi-query associative recall (MQAR, Zoology: arXiv 2312.04927), the task that separates
attention from fixed-state recurrences.

A sequence first lists ``n_pairs`` key-value pairs, then asks for ``n_queries`` of the keys
again; after each queried key the model must produce that key's value. Attention can look
the key up in its cache however many pairs came before; a recurrent layer must have kept
every pair in its fixed-size state, which gets harder the more pairs there are.

**The exact format** (:func:`mqar_batch`). The vocabulary ``0 .. vocab_size - 1`` is split
in two halves: keys are ``0 .. vocab_size / 2 - 1``, values ``vocab_size / 2 .. vocab_size - 1``.
One sequence of ``T = 2 n_pairs + 2 n_queries`` tokens is::

    k_1 v_1 k_2 v_2 ... k_n v_n   q_1 a_1 q_2 a_2 ... q_m a_m
    \\________ the pairs ________/ \\______ the queries ______/

* the ``n_pairs`` keys of one sequence are distinct (a key that appeared twice would have
  two answers); values are drawn independently, so two keys may share a value;
* the queried keys ``q_1 .. q_m`` are ``m = n_queries`` distinct keys of the pairs, in a
  random order; ``a_i`` is ``q_i``'s value (given as input, like every token, so the next
  query can follow it: teacher forcing);
* ``targets`` has the shape of ``inputs``, ``-100`` (PyTorch's ``ignore_index``)
  everywhere except at the query positions ``t = 2 n_pairs + 2 i``, where it holds the
  answer: ``targets[t] = inputs[t + 1] = a_i``. So the logits a causal model returns at a
  query key's position are its guess of the value, and only those positions are scored.

**Recall** (:func:`recall_accuracy`) is the share of query positions whose arg-max logit is
the answer: chance is ``2 / vocab_size`` for a model that knows the answer is a value.
"""

from __future__ import annotations

import torch
from torch import Tensor

from toolkit.arguments import check_even, check_int

#: ``targets`` at the positions that are not scored (``F.cross_entropy``'s ``ignore_index``).
IGNORE = -100


def check_mqar_arguments(batch_size: int, n_pairs: int, vocab_size: int,
                         n_queries: int | None) -> int:
    """The sizes of :func:`mqar_batch`; returns ``n_queries`` (``n_pairs`` when ``None``).

    Raises ``ValueError`` unless ``batch_size, n_pairs >= 1``, ``vocab_size`` is even,
    ``n_pairs <= vocab_size / 2`` (distinct keys) and ``1 <= n_queries <= n_pairs``.
    """
    check_int("batch_size", batch_size)
    check_int("n_pairs", n_pairs)
    check_even("vocab_size", vocab_size)
    n_queries = n_pairs if n_queries is None else n_queries
    check_int("n_queries", n_queries)
    if n_pairs > vocab_size // 2:
        raise ValueError(f"n_pairs={n_pairs} needs as many distinct keys; vocab_size={vocab_size} "
                         f"has {vocab_size // 2}")
    if n_queries > n_pairs:
        raise ValueError(f"n_queries={n_queries} must be at most n_pairs={n_pairs} (queried keys "
                         "are distinct keys of the pairs)")
    return n_queries


def check_recall_inputs(logits: Tensor, targets: Tensor) -> None:
    """``logits (B, T, V)`` for ``targets (B, T)`` with at least one scored position."""
    if logits.dim() != 3 or logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)}: "
                         "logits must be (B, T, V) for targets (B, T)")
    if not (targets != IGNORE).any():
        raise ValueError("targets has no scored position (all are -100)")


def mqar_batch(
    batch_size: int,
    n_pairs: int,
    vocab_size: int,
    n_queries: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """A batch of MQAR sequences in the format of the module docstring.

    Args:
        batch_size: sequences ``B``.
        n_pairs: key-value pairs per sequence, ``1 <= n_pairs <= vocab_size / 2``.
        vocab_size: even; keys ``[0, V/2)``, values ``[V/2, V)``.
        n_queries: queried keys per sequence, ``1 <= n_queries <= n_pairs`` (default
            ``n_pairs``: every key is asked once).
        generator: for reproducible batches.

    Returns:
        ``inputs``, ``targets``: ``(B, 2 n_pairs + 2 n_queries)`` int64; ``targets`` is
        ``-100`` except at each query key's position, where it is that key's value.
    """
    n_queries = check_mqar_arguments(batch_size, n_pairs, vocab_size, n_queries)
    B, n, m, n_keys = batch_size, n_pairs, n_queries, vocab_size // 2
    # Distinct keys per sequence: the first n of a random permutation of the key range.
    keys = torch.rand(B, n_keys, generator=generator).argsort(dim=-1)[:, :n]  # (B, n)
    values = torch.randint(n_keys, vocab_size, (B, n), generator=generator)  # (B, n), repeats ok
    # Which pairs are asked, in which order: m distinct indices into the pairs.
    asked = torch.rand(B, n, generator=generator).argsort(dim=-1)[:, :m]  # (B, m)
    queries, answers = keys.gather(1, asked), values.gather(1, asked)  # (B, m) each
    pairs = torch.stack((keys, values), dim=-1).flatten(1)  # k_1 v_1 ... k_n v_n: (B, 2n)
    asks = torch.stack((queries, answers), dim=-1).flatten(1)  # q_1 a_1 ... q_m a_m: (B, 2m)
    inputs = torch.cat((pairs, asks), dim=1)  # (B, 2n + 2m)
    targets = torch.full_like(inputs, IGNORE)
    targets[:, 2 * n::2] = answers  # at query q_i (position 2n + 2i) the answer a_i
    return inputs, targets


def recall_accuracy(logits: Tensor, targets: Tensor) -> float:
    """The share of scored positions (``targets != -100``) where ``logits`` pick the target.

    Args:
        logits: ``(B, T, V)``, the model's output at every position.
        targets: ``(B, T)`` int64 from :func:`mqar_batch`.

    Returns:
        the mean, over the ``(b, t)`` with ``targets[b, t] != -100``, of
        ``argmax_v logits[b, t, v] == targets[b, t]``: a float in ``[0, 1]``.

    Raises:
        ValueError: when no position is scored.
    """
    check_recall_inputs(logits, targets)
    scored = targets != IGNORE  # the query positions
    hits = logits.argmax(dim=-1)[scored] == targets[scored]
    return hits.float().mean().item()
