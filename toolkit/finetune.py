"""Fine-tuning the tiny BERT for a classification task built from the course corpus.

The task is next-sentence prediction between *documents*: the corpus is a set of
standard-library modules (:data:`toolkit.data.STDLIB_CORPUS_FILES`), each one a
document cut into segments of ``segment_len`` words. A pair ``[CLS] A [SEP] B [SEP]``
is IsNext (label 0) when B is the segment that follows A in its module, NotNext
(label 1) when B comes from another module (:func:`toolkit.mlm.document_nsp_pairs`).
The last ``n_val_documents`` modules are held out: the accuracy is measured on pairs of
modules the classifier never trained on.

Fine-tuning follows BERT (arXiv 1810.04805, section 4): a classifier on the pooled
``[CLS]`` vector (:class:`toolkit.bert.BertClassifier`), every weight trained, a small
learning rate with warm-up and linear decay, a few hundred steps. The baseline is the
same model from a random initialisation: what pre-training adds shows as the gap.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from toolkit.bert import BertClassifier
from toolkit.data import STDLIB_CORPUS_FILES, stdlib_corpus_text
from toolkit.mlm import TOKEN_PATTERN, WordVocab, document_nsp_pairs, pair_inputs
from toolkit.pretrain import SEGMENT_LEN


def nsp_documents(
    vocab: WordVocab, segment_len: int = SEGMENT_LEN, n_val_documents: int = 3
) -> tuple[list[list[list[int]]], list[list[list[int]]]]:
    """The corpus modules as documents of ``segment_len``-word segments (word ids).

    Returns:
        ``(train_documents, val_documents)``: the last ``n_val_documents`` modules are the
        validation documents.
    """
    documents = []
    for name in STDLIB_CORPUS_FILES:
        words = TOKEN_PATTERN.findall(stdlib_corpus_text((name,)))
        ids = [vocab.stoi.get(w, vocab.unk_id) for w in words]
        n = len(ids) // segment_len
        documents.append([ids[i * segment_len:(i + 1) * segment_len] for i in range(n)])
    return documents[:-n_val_documents], documents[-n_val_documents:]


def pair_tensors(pairs, labels: Tensor, seq_len: int) -> dict[str, Tensor]:
    """``pairs`` as BERT inputs: ``input_ids``, ``token_type_ids``, ``attention_mask``
    ``(n, seq_len)`` (:func:`toolkit.mlm.pair_inputs`) and ``labels`` ``(n,)``."""
    rows = [pair_inputs(a, b, seq_len) for a, b in pairs]
    out = {key: torch.stack([r[key] for r in rows]) for key in rows[0]}
    out["labels"] = labels
    return out


def nsp_task(
    vocab: WordVocab, seq_len: int, seed: int = 0, *,
    pair_fn: Callable[..., tuple[list, Tensor]] = document_nsp_pairs,
) -> tuple[dict, dict]:
    """Training and validation NSP tensors (:func:`pair_tensors`) from the held-out split.

    Args:
        pair_fn: builds the pairs, called as :func:`toolkit.mlm.document_nsp_pairs` is (the
            default). A notebook passes its own: with the student build of the toolkit the
            default is the stub until the assignment is over.
    """
    train_documents, val_documents = nsp_documents(vocab, (seq_len - 3) // 2)
    generator = torch.Generator().manual_seed(seed)
    train = pair_tensors(*pair_fn(train_documents, generator), seq_len)
    val = pair_tensors(*pair_fn(val_documents, generator), seq_len)
    return train, val


def finetune(
    classifier: BertClassifier, data: dict[str, Tensor], steps: int, *, batch_size: int = 32,
    lr: float = 3e-4, warmup: float = 0.1, seed: int = 0,
) -> list[float]:
    """AdamW on the cross-entropy of ``classifier`` over every weight, linear warm-up and
    linear decay, gradient clipping at 1; returns the losses."""
    optimizer = torch.optim.AdamW(classifier.parameters(), lr=lr, weight_decay=0.01)
    generator = torch.Generator().manual_seed(seed)
    warmup_steps = max(1, int(warmup * steps))
    n = len(data["labels"])
    classifier.train()
    losses = []
    for step in range(steps):
        scale = min((step + 1) / warmup_steps, (steps - step) / max(1, steps - warmup_steps))
        for group in optimizer.param_groups:
            group["lr"] = lr * max(0.0, scale)
        idx = torch.randint(n, (batch_size,), generator=generator)
        logits = classifier(data["input_ids"][idx], data["token_type_ids"][idx],
                            data["attention_mask"][idx])
        loss = F.cross_entropy(logits, data["labels"][idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(classifier.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    classifier.eval()
    return losses


@torch.no_grad()
def classification_accuracy(classifier: BertClassifier, data: dict[str, Tensor]) -> float:
    """Share of the examples whose largest logit is their label (the model in eval mode)."""
    classifier.eval()
    logits = classifier(data["input_ids"], data["token_type_ids"], data["attention_mask"])
    return (logits.argmax(-1) == data["labels"]).double().mean().item()


def majority_accuracy(data: dict[str, Tensor]) -> float:
    """Accuracy of always predicting the most frequent label."""
    counts = torch.bincount(data["labels"])
    return counts.max().item() / max(1, counts.sum().item())


__all__ = [
    "classification_accuracy",
    "finetune",
    "majority_accuracy",
    "nsp_documents",
    "nsp_task",
    "pair_tensors",
]
