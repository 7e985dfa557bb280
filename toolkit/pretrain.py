"""Pre-training the tiny BERT with masked language modelling on the course corpus.

Data. The corpus is :func:`toolkit.data.load_text`'s standard-library source code,
split into words and punctuation (:class:`toolkit.mlm.WordVocab`, built from the
training part only; about 1,900 entries). The token stream is split 90/10 into
training and validation text (the validation tail never trains), and each part is cut
into consecutive *segments* of ``segment_len`` tokens. Example ``i`` is the pair
``[CLS] segment_i [SEP] segment_{i+1} [SEP]``: two contiguous pieces of text, as
RoBERTa's "full sentences" without NSP (:func:`toolkit.mlm.sample_nsp_pairs` makes NSP
pairs from the same segments).

Objective. Every batch is masked afresh (dynamic masking,
:class:`toolkit.mlm.MaskedLMDataset`) and the loss is the cross-entropy of the
selected positions. Only those positions go through the MLM head: with a vocabulary
of ~1,900 words and 15% of the positions selected, that makes the output layer seven
times cheaper.

Evaluation. :func:`evaluation_batch` masks the validation pairs once with a fixed seed
and asks for the words behind the ``[MASK]`` tokens only: a selected token left
unchanged (10% of them) can simply be copied, so predicting it says nothing about the
context. :func:`masked_accuracy` is the share of those positions whose original word is
the model's top prediction. The **unigram baseline** (:func:`unigram_accuracy`) predicts
the training text's most frequent word (``,``) everywhere, the best any model can do
without looking at the context: about 4.5%. A 2-layer, 64-wide model trained for 600
steps (about half a minute of CPU) gets about 13%, three times that.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor

from toolkit.bert import BertConfig, TinyBert, tied_parameter_names
from toolkit.data import load_text, split_train_val
from toolkit.mlm import (
    IGNORE_INDEX,
    TOKEN_PATTERN,
    MaskedLMDataset,
    WordVocab,
    mask_tokens,
    pair_inputs,
)

#: Segment length: ``[CLS] + 30 + [SEP] + 30 + [SEP]`` is 63 positions.
SEGMENT_LEN = 30
MIN_COUNT = 3
EVAL_SEED = 1234


@dataclass
class MLMCorpus:
    """The tokenized corpus as ``[CLS] A [SEP] B [SEP]`` pairs (no padding needed).

    ``train_ids``/``val_ids`` ``(N, T)`` and the matching ``*_types`` (segment ids).
    """

    vocab: WordVocab
    train_ids: Tensor
    train_types: Tensor
    val_ids: Tensor
    val_types: Tensor
    train_stream: Tensor

    @property
    def seq_len(self) -> int:
        return self.train_ids.size(1)


def contiguous_pairs(stream: Tensor, segment_len: int) -> tuple[Tensor, Tensor]:
    """``[CLS] s_i [SEP] s_{i+1} [SEP]`` for consecutive segments ``s_i`` of ``stream``."""
    n = len(stream) // segment_len
    if n < 2:
        raise ValueError(f"stream: {len(stream)} tokens make fewer than two segments of "
                         f"{segment_len}")
    segments = stream[: n * segment_len].view(n, segment_len).tolist()
    rows = [pair_inputs(a, b, 2 * segment_len + 3) for a, b in zip(segments, segments[1:])]
    return (torch.stack([r["input_ids"] for r in rows]),
            torch.stack([r["token_type_ids"] for r in rows]))


def load_mlm_corpus(segment_len: int = SEGMENT_LEN, min_count: int = MIN_COUNT) -> MLMCorpus:
    """Tokenize, split 90/10 and pair the standard-library corpus (deterministic)."""
    text = load_text()
    words = TOKEN_PATTERN.findall(text)
    n_train = len(split_train_val(torch.arange(len(words)))[0])  # the same 90/10 cut
    vocab = WordVocab.from_text(" ".join(words[:n_train]), min_count)
    stream = torch.tensor([vocab.stoi.get(w, vocab.unk_id) for w in words])
    train, val = stream[:n_train], stream[n_train:]
    train_ids, train_types = contiguous_pairs(train, segment_len)
    val_ids, val_types = contiguous_pairs(val, segment_len)
    return MLMCorpus(vocab, train_ids, train_types, val_ids, val_types, train)


def evaluation_batch(
    corpus: MLMCorpus, n: int = 128, seed: int = EVAL_SEED, *,
    mask_fn: Callable[..., tuple[Tensor, Tensor]] = mask_tokens,
) -> dict[str, Tensor]:
    """The first ``n`` validation pairs, masked once with ``seed``; the words to predict
    are those behind ``[MASK]``.

    The masking selects 15% of the tokens and leaves 10% of those unchanged: a model can
    copy such a token from its input without reading any context (that alone would beat
    the unigram baseline by three times). So only the positions whose input is
    ``[MASK]`` keep their label; the unchanged and the randomly replaced ones get -100.

    Args:
        mask_fn: the masking, called as :func:`toolkit.mlm.mask_tokens` is (the default).
            A notebook passes its own ``mask_tokens``: with the student build of the
            toolkit the default is the stub until the assignment is over. The grader
            evaluates with the default.

    Returns ``input_ids``, ``token_type_ids``, ``attention_mask`` and ``labels``
    (the original word behind each ``[MASK]``, ``-100`` elsewhere), each ``(n, T)``.
    """
    ids = corpus.val_ids[:n]
    v = corpus.vocab
    inputs, labels = mask_fn(ids, v.special_ids, v.mask_id, v.vocab_size,
                             generator=torch.Generator().manual_seed(seed))
    labels = labels.masked_fill(inputs != v.mask_id, IGNORE_INDEX)  # only what [MASK] hides
    return {"input_ids": inputs, "token_type_ids": corpus.val_types[:n],
            "attention_mask": torch.ones_like(ids), "labels": labels}


def unigram_accuracy(train_stream: Tensor, labels: Tensor, special_ids=range(5)) -> float:
    """Accuracy of always predicting the most frequent non-special training token."""
    counts = torch.bincount(train_stream, minlength=int(labels.max()) + 1).clone()
    counts[list(special_ids)] = 0
    targets = labels[labels != IGNORE_INDEX]
    return (targets == counts.argmax()).double().mean().item()


def masked_accuracy(logits: Tensor, labels: Tensor) -> float:
    """Share of the ``labels != -100`` positions whose top logit is the label.

    ``logits`` is ``(n_selected, V)`` (already picked at the selected positions, in
    row-major order) or ``(B, T, V)``.
    """
    targets = labels[labels != IGNORE_INDEX]
    if logits.dim() == 3:
        logits = logits[labels != IGNORE_INDEX]
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits {tuple(logits.shape)} do not match {targets.numel()} targets")
    return (logits.argmax(-1) == targets).double().mean().item()


@torch.no_grad()
def evaluate(model: TinyBert, batch: dict[str, Tensor]) -> float:
    """:func:`masked_accuracy` of ``model`` on an :func:`evaluation_batch`."""
    was_training = model.training
    model.eval()
    hidden = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    selected = batch["labels"] != IGNORE_INDEX
    accuracy = masked_accuracy(model.mlm_head(hidden[selected]), batch["labels"])
    model.train(was_training)
    return accuracy


def mlm_loss(model: TinyBert, inputs: Tensor, labels: Tensor, token_type_ids: Tensor) -> Tensor:
    """Cross-entropy of the selected positions (the others never reach the head)."""
    hidden = model(inputs, token_type_ids)  # (B, T, d)
    selected = labels != IGNORE_INDEX
    return F.cross_entropy(model.mlm_head(hidden[selected]), labels[selected])


def pretrain(
    model: TinyBert, corpus: MLMCorpus, steps: int, *, batch_size: int = 32, lr: float = 3e-3,
    warmup: float = 0.1, seed: int = 0, masking: MaskedLMDataset | None = None,
    callback: Callable[[int, float], None] | None = None,
) -> list[float]:
    """AdamW with linear warm-up and cosine decay, gradient clipping at 1; returns losses.

    Args:
        masking: serves the masked batches (default: dynamic masking of
            ``corpus.train_ids`` seeded with ``seed``).
        callback: called as ``callback(step, loss)`` after every step.
    """
    v = corpus.vocab
    if masking is None:
        masking = MaskedLMDataset(corpus.train_ids, v.special_ids, v.mask_id, v.vocab_size,
                                  seed=seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    generator = torch.Generator().manual_seed(seed)  # which sequences form each batch
    warmup_steps = max(1, int(warmup * steps))
    model.train()
    losses = []
    for step in range(steps):
        ramp = min(1.0, (step + 1) / warmup_steps)
        decay = 0.5 * (1 + math.cos(math.pi * step / steps))  # cosine from 1 towards 0
        for group in optimizer.param_groups:
            group["lr"] = lr * ramp * decay
        indices = torch.randint(len(masking), (batch_size,), generator=generator)
        inputs, labels = masking.batch(indices)
        loss = mlm_loss(model, inputs, labels, corpus.train_types[indices])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if callback is not None:
            callback(step, losses[-1])
    model.eval()
    return losses


def save_bert(model: TinyBert, path: str | Path) -> None:
    """Weights (tied copies left out) and the config, in one safetensors file."""
    tied = set(tied_parameter_names(model))
    state = {n: t.detach().contiguous().cpu() for n, t in model.state_dict().items()
             if n not in tied}
    save_file(state, str(path), metadata={"format": "pt",
                                          "bert_config": json.dumps(model.config.to_dict())})


def load_bert(path: str | Path, model_class: type = TinyBert) -> TinyBert:
    """Rebuild ``model_class(config)`` from :func:`save_bert`'s file, in eval mode."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: no checkpoint at {path}")
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata() or {}
        if "bert_config" not in metadata:
            raise ValueError(f"path: {path} has no 'bert_config' metadata; save it with save_bert")
        state = {name: f.get_tensor(name) for name in f.keys()}
    model = model_class(BertConfig.from_dict(json.loads(metadata["bert_config"])))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - set(tied_parameter_names(model)):
        raise ValueError(f"path: checkpoint does not fit (missing {missing}, "
                         f"unexpected {unexpected})")
    return model.eval()
