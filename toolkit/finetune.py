"""Fine-tuning the tiny BERT for classification tasks built from the course corpus.

Two tasks, both from the corpus's standard-library modules.

**Which module?** (:func:`module_task`, the graded one). An example is two consecutive
pieces of ``segment_len`` words of one module, read as the pair ``[CLS] A [SEP] B [SEP]``
(:func:`encode_pairs`), and its label is the module, one of :data:`TASK_MODULES` (label
``i`` is ``TASK_MODULES[i]``). Each module gives the same number of examples; the last
``n_val`` of each module's first ``n_train + n_val`` are held out, so the held-out
examples are text that no fine-tuning step saw (the masked-LM pre-training read it,
unlabelled, as pre-training reads any text).

**Next-sentence prediction between documents** (:func:`nsp_documents`,
:func:`pair_tensors`): the corpus modules (:data:`toolkit.data.STDLIB_CORPUS_FILES`) as
documents cut into segments of ``segment_len`` words. A pair ``[CLS] A [SEP] B [SEP]`` is
IsNext (label 0) when B is the segment that follows A in its module, NotNext (label 1)
when B comes from another module (:func:`toolkit.mlm.document_nsp_pairs`). The last
``n_val_documents`` modules are held out.

Fine-tuning follows BERT (arXiv 1810.04805, section 4): a classifier on the pooled
``[CLS]`` vector (:class:`toolkit.bert.BertClassifier`) on the pre-trained encoder
(:func:`classifier_from_pretrained`), every weight trained, a small learning rate with
warm-up and linear decay, a few hundred steps at most. The baseline is the same model from
a random initialisation. At this course's size the baseline wins the module task: the
masked-LM objective never trains ``[CLS]`` (it is never masked), and the module shows in
the words themselves, which a fresh encoder learns from the labelled examples. What
fine-tuning looked like is drawn by :func:`toolkit.widgets.blocks.finetuning_explorer`
(:func:`finetuning_curve`, and :func:`cls_attention`, what ``[CLS]`` attends to).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor

from toolkit.attention import attention_weights, split_heads
from toolkit.bert import BertClassifier, BertConfig, TinyBert, tied_parameter_names
from toolkit.data import STDLIB_CORPUS_FILES, stdlib_corpus_text
from toolkit.mlm import (
    CLS_ID,
    PAD_ID,
    SEP_ID,
    TOKEN_PATTERN,
    WordVocab,
    pair_inputs,
)
from toolkit.pretrain import SEGMENT_LEN, load_bert

#: The modules of :func:`module_task`; label ``i`` is ``TASK_MODULES[i]``.
TASK_MODULES = ("calendar.py", "fractions.py", "functools.py", "heapq.py", "pprint.py")
#: Words per piece of :func:`module_task`: ``[CLS] + 15 + [SEP] + 15 + [SEP]`` = 33 positions.
TASK_SEGMENT_LEN = 15
TASK_SEQ_LEN = 2 * TASK_SEGMENT_LEN + 3


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


def module_words(vocab: WordVocab, name: str) -> list[int]:
    """The word ids of one corpus module (unknown words are ``[UNK]``)."""
    words = TOKEN_PATTERN.findall(stdlib_corpus_text((name,)))
    return [vocab.stoi.get(w, vocab.unk_id) for w in words]


def encode_pairs(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], seq_len: int
                 ) -> dict[str, Tensor]:
    """``[CLS] A [SEP] B [SEP] [PAD] ...`` for every pair, as int64 tensors ``(n, seq_len)``.

    ``token_type_ids`` is 0 for ``[CLS]``, A and the first ``[SEP]``, 1 for B and the
    second ``[SEP]``, 0 for padding; ``attention_mask`` is 1 for real tokens, 0 for
    padding (Hugging Face's BERT tokenizer). Nothing is truncated: a pair longer than
    ``seq_len`` is a ``ValueError``.
    """
    ids, types, mask = [], [], []
    for a, b in pairs:
        n = len(a) + len(b) + 3  # [CLS] A [SEP] B [SEP]
        if n > seq_len:
            raise ValueError(f"pairs: a pair of {len(a)} + {len(b)} tokens needs {n} "
                             f"positions, more than seq_len={seq_len}")
        pad = seq_len - n
        ids.append([CLS_ID, *a, SEP_ID, *b, SEP_ID] + [PAD_ID] * pad)
        types.append([0] * (len(a) + 2) + [1] * (len(b) + 1) + [0] * pad)  # segment A, B
        mask.append([1] * n + [0] * pad)  # 1 = real token
    return {"input_ids": torch.tensor(ids, dtype=torch.long).view(-1, seq_len),
            "token_type_ids": torch.tensor(types, dtype=torch.long).view(-1, seq_len),
            "attention_mask": torch.tensor(mask, dtype=torch.long).view(-1, seq_len)}


def module_task(
    vocab: WordVocab, *, n_train: int = 128, n_val: int = 32,
    segment_len: int = TASK_SEGMENT_LEN, modules: Sequence[str] = TASK_MODULES,
    encode: Callable[..., dict[str, Tensor]] = encode_pairs,
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """The "which module?" task: training and held-out examples (see the module docstring).

    Example ``j`` of a module is the pair (piece ``2j``, piece ``2j + 1``) of its
    ``segment_len``-word pieces; examples ``0 .. n_train - 1`` train, the next ``n_val``
    are held out. Label ``i`` is ``modules[i]``, classes in that order.

    Args:
        encode: turns pairs into inputs, called as :func:`encode_pairs` is (the default);
            a notebook passes its own.

    Returns:
        ``(train, val)``: ``input_ids``, ``token_type_ids``, ``attention_mask``
        ``(n, 2 segment_len + 3)`` and ``labels`` ``(n,)`` int64, module by module.
    """
    seq_len = 2 * segment_len + 3
    parts = {"train": ([], []), "val": ([], [])}
    for label, name in enumerate(modules):
        ids = module_words(vocab, name)
        n = n_train + n_val
        if len(ids) < 2 * n * segment_len:
            raise ValueError(f"modules: {name} has {len(ids)} words, fewer than the "
                             f"{2 * n * segment_len} that {n} examples need")
        pieces = [ids[i * segment_len:(i + 1) * segment_len] for i in range(2 * n)]
        examples = list(zip(pieces[0::2], pieces[1::2]))  # (piece 2j, piece 2j + 1)
        for part, chosen in (("train", examples[:n_train]), ("val", examples[n_train:])):
            parts[part][0].extend(chosen)
            parts[part][1].extend([label] * len(chosen))
    out = []
    for pairs, labels in parts.values():
        data = dict(encode(pairs, seq_len))
        data["labels"] = torch.tensor(labels, dtype=torch.long)
        out.append(data)
    return out[0], out[1]


def classifier_from_pretrained(path: str | Path, n_labels: int, dropout: float = 0.1
                               ) -> BertClassifier:
    """A :class:`~toolkit.bert.BertClassifier` whose encoder is the pre-trained
    :func:`~toolkit.pretrain.save_bert` checkpoint at ``path``; its head is new."""
    return BertClassifier(load_bert(path, model_class=TinyBert), n_labels, dropout=dropout)


def save_classifier(classifier: BertClassifier, path: str | Path) -> None:
    """The classifier's weights (tied copies left out), its encoder's config and its
    number of labels, in one safetensors file."""
    tied = {f"bert.{n}" for n in tied_parameter_names(classifier.bert)}
    state = {n: t.detach().contiguous().cpu() for n, t in classifier.state_dict().items()
             if n not in tied}
    save_file(state, str(path), metadata={
        "format": "pt", "bert_config": json.dumps(classifier.bert.config.to_dict()),
        "n_labels": str(classifier.classifier.out_features)})


def load_classifier(path: str | Path, model_class: type = TinyBert,
                    classifier_class: type = BertClassifier) -> BertClassifier:
    """Rebuild ``classifier_class(model_class(config), n_labels)`` from
    :func:`save_classifier`'s file, in eval mode."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: no checkpoint at {path}")
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata() or {}
        if "bert_config" not in metadata or "n_labels" not in metadata:
            raise ValueError(f"path: {path} is not a classifier; save it with save_classifier")
        state = {name: f.get_tensor(name) for name in f.keys()}
    bert = model_class(BertConfig.from_dict(json.loads(metadata["bert_config"])))
    classifier = classifier_class(bert, int(metadata["n_labels"]))
    missing, unexpected = classifier.load_state_dict(state, strict=False)
    tied = {f"bert.{n}" for n in tied_parameter_names(bert)}
    if unexpected or set(missing) - tied:
        raise ValueError(f"path: checkpoint does not fit (missing {missing}, "
                         f"unexpected {unexpected})")
    return classifier.eval()


@torch.no_grad()
def cls_attention(classifier: BertClassifier, input_ids: Tensor,
                  token_type_ids: Tensor | None = None,
                  attention_mask: Tensor | None = None) -> Tensor:
    """What ``[CLS]`` attends to: the attention weights of query position 0 in every
    layer and head, ``(n_layers, n_heads, T)`` for one example (``input_ids`` ``(1, T)``).

    The weights are recomputed from each block's attention input (caught by a forward
    hook) with its ``q_proj`` and ``k_proj``: ``softmax(q_0 k^T / sqrt(d_k))`` over the
    keys the padding mask leaves visible.
    """
    captured = []
    blocks = classifier.bert.encoder.layers

    def catch(module, args, kwargs):
        captured.append((module, args[0], kwargs.get("mask")))

    hooks = [block.self_attn.register_forward_pre_hook(catch, with_kwargs=True)
             for block in blocks]
    was_training = classifier.training
    classifier.eval()
    try:
        classifier.bert(input_ids, token_type_ids, attention_mask)
    finally:
        for hook in hooks:
            hook.remove()
        classifier.train(was_training)
    rows = []
    for attn, x, mask in captured:
        q = split_heads(attn.q_proj(x[:, :1]), attn.n_heads)  # (1, h, 1, d_k): [CLS] asks
        k = split_heads(attn.k_proj(x), attn.n_heads)  # (1, h, T, d_k)
        rows.append(attention_weights(q, k, mask)[0, :, 0])  # (h, T)
    return torch.stack(rows)  # (n_layers, n_heads, T)


def attention_examples(
    classifier: BertClassifier, data: dict[str, Tensor], indices: Sequence[int],
    vocab: WordVocab, class_names: Sequence[str],
) -> list[dict]:
    """For each example ``i`` of ``indices``: its real tokens (``tokens``), the ``[CLS]``
    attention over them (``weights`` ``(n_layers, n_heads, T_i)``, :func:`cls_attention`),
    its class and the classifier's prediction (names from ``class_names``); what
    :func:`toolkit.widgets.blocks.finetuning_explorer` draws."""
    out = []
    classifier.eval()
    for i in indices:
        n = int(data["attention_mask"][i].sum())  # real tokens only
        ids, types = data["input_ids"][i:i + 1, :n], data["token_type_ids"][i:i + 1, :n]
        mask = data["attention_mask"][i:i + 1, :n]
        with torch.no_grad():
            predicted = int(classifier(ids, types, mask).argmax(-1))
        out.append({"tokens": [vocab.token_str(int(t)) for t in ids[0]],
                    "weights": cls_attention(classifier, ids, types, mask),
                    "label": class_names[int(data["labels"][i])],
                    "predicted": class_names[predicted]})
    return out


def pair_tensors(pairs, labels: Tensor, seq_len: int) -> dict[str, Tensor]:
    """``pairs`` as BERT inputs: ``input_ids``, ``token_type_ids``, ``attention_mask``
    ``(n, seq_len)`` (:func:`toolkit.mlm.pair_inputs`) and ``labels`` ``(n,)``."""
    rows = [pair_inputs(a, b, seq_len) for a, b in pairs]
    out = {key: torch.stack([r[key] for r in rows]) for key in rows[0]}
    out["labels"] = labels
    return out


def finetune(
    classifier: BertClassifier, data: dict[str, Tensor], steps: int, *, batch_size: int = 32,
    lr: float = 3e-4, warmup: float = 0.1, seed: int = 0,
    callback: Callable[[int, float], None] | None = None,
) -> list[float]:
    """AdamW on the cross-entropy of ``classifier`` over every weight, linear warm-up and
    linear decay, gradient clipping at 1; returns the losses.

    Args:
        callback: called as ``callback(step, loss)`` after every step (the classifier is
            in training mode again when it returns).
    """
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
        if callback is not None:
            callback(step, losses[-1])
            classifier.train()
    classifier.eval()
    return losses


def finetuning_curve(
    classifier: BertClassifier, train: dict[str, Tensor], val: dict[str, Tensor], steps: int,
    *, every: int = 10, **kwargs,
) -> dict[str, list]:
    """:func:`finetune` ``classifier``, measuring the accuracy on ``train`` and ``val``
    before the first step and every ``every`` steps; returns ``{"step", "train", "val",
    "loss"}`` (``loss``: every step's training loss)."""
    curve = {"step": [0], "train": [classification_accuracy(classifier, train)],
             "val": [classification_accuracy(classifier, val)], "loss": []}

    def measure(step, loss):
        curve["loss"].append(loss)
        if (step + 1) % every == 0 or step + 1 == steps:
            curve["step"].append(step + 1)
            curve["train"].append(classification_accuracy(classifier, train))
            curve["val"].append(classification_accuracy(classifier, val))

    finetune(classifier, train, steps, callback=measure, **kwargs)
    return curve


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
    "TASK_MODULES",
    "TASK_SEQ_LEN",
    "attention_examples",
    "classification_accuracy",
    "classifier_from_pretrained",
    "cls_attention",
    "encode_pairs",
    "finetune",
    "finetuning_curve",
    "load_classifier",
    "majority_accuracy",
    "module_task",
    "module_words",
    "nsp_documents",
    "pair_tensors",
    "save_classifier",
]
