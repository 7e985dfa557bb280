"""A tiny BERT: embeddings, an encoder stack, and its three heads (arXiv 1810.04805).

Embeddings
----------
BERT's input vector at position ``t`` is the sum of three *learned* tables, then a
LayerNorm and dropout::

    e_t = LN(E_word[id_t] + E_position[t] + E_segment[type_t])

* ``E_position`` is an ``nn.Embedding(max_seq_len, d)`` trained like any weight, as in
  GPT-2: BERT does **not** use the Transformer paper's fixed sinusoids. A sequence
  longer than ``max_seq_len`` has no row and raises an error.
* ``E_segment`` (``token_type_embeddings``, 2 rows) tells segment A from segment B of
  ``[CLS] A [SEP] B [SEP]`` (see :mod:`toolkit.mlm`).

Names follow Hugging Face's ``BertEmbeddings`` (``word_embeddings``,
``position_embeddings``, ``token_type_embeddings``, ``LayerNorm``), so its weights load
unchanged (tested).

Heads
-----
* :class:`MLMHead`: ``dense -> GELU -> LayerNorm`` then the **tied** decoder:
  ``logits = h @ E_word^T + bias``. The decoder's weight *is* the word-embedding
  Parameter (one ``(V, d)`` matrix for input and output, arXiv 1608.05859); only the
  output bias is its own.
* :class:`NSPHead`: the *pooler* (``tanh(dense(h_[CLS]))``) and a 2-way linear layer,
  label 0 = IsNext, 1 = NotNext (Hugging Face's convention).
* :class:`ClassificationHead`: fine-tuning on a sentence task reuses the pooler's
  recipe with a new ``n_labels``-way classifier on ``[CLS]``.

The encoder is :class:`toolkit.residual.EncoderStack`. BERT is Post-LN; the tiny
models of this course default to Pre-LN with a final norm, which trains without
warm-up at the high learning rates a short CPU run needs (``norm_first=False`` gives
BERT's layout).

Shapes: ``input_ids``, ``token_type_ids``, ``attention_mask`` ``(B, T)``; hidden
states ``(B, T, d_model)``; MLM logits ``(..., vocab_size)``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from toolkit.arguments import check_int
from toolkit.norm import LayerNorm
from toolkit.residual import EncoderStack


@dataclass
class BertConfig:
    """Hyper-parameters of :class:`TinyBert` (``d_ff=None``: ``4 d_model``)."""

    vocab_size: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int | None = None
    max_seq_len: int = 64
    type_vocab_size: int = 2
    norm_first: bool = True
    dropout: float = 0.0
    eps: float = 1e-12

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "max_seq_len",
                     "type_vocab_size"):
            check_int(name, getattr(self, name))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> BertConfig:
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"d has unknown BertConfig fields {sorted(unknown)}")
        return cls(**d)


class BertEmbeddings(nn.Module):
    """``LN(E_word[id] + E_position[t] + E_segment[type])``, then dropout.

    Args:
        vocab_size, d_model: the word table is ``(vocab_size, d_model)``.
        max_seq_len: rows of the learned position table.
        type_vocab_size: segments (2: A and B).
        dropout: after the LayerNorm.
        eps: the LayerNorm's epsilon (BERT: 1e-12).

    Shapes: ``input_ids`` ``(B, T)``, optional ``token_type_ids`` ``(B, T)`` (default all
    0) -> ``(B, T, d_model)``.
    """

    def __init__(self, vocab_size: int, d_model: int, max_seq_len: int,
                 type_vocab_size: int = 2, dropout: float = 0.0, eps: float = 1e-12):
        super().__init__()
        self.max_seq_len = max_seq_len
        self.word_embeddings = nn.Embedding(vocab_size, d_model)
        self.position_embeddings = nn.Embedding(max_seq_len, d_model)  # learned, not sinusoidal
        self.token_type_embeddings = nn.Embedding(type_vocab_size, d_model)
        self.LayerNorm = LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        T = input_ids.size(1)
        if T > self.max_seq_len:
            raise ValueError(f"input_ids has {T} positions but the position table has "
                             f"max_seq_len={self.max_seq_len} rows: truncate the input")
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)  # a single segment A
        positions = torch.arange(T, device=input_ids.device)  # (T,)
        e = (self.word_embeddings(input_ids) + self.position_embeddings(positions)
             + self.token_type_embeddings(token_type_ids))  # E_word + E_pos + E_seg
        return self.dropout(self.LayerNorm(e))


class MLMHead(nn.Module):
    """``logits = LN(GELU(dense(h))) @ E_word^T + bias``, the decoder tied to ``E_word``.

    Args:
        word_embeddings: the input embedding table; its Parameter becomes
            ``decoder.weight`` (the same object, not a copy).
        eps: the LayerNorm's epsilon.
    """

    def __init__(self, word_embeddings: nn.Embedding, eps: float = 1e-12):
        super().__init__()
        vocab_size, d_model = word_embeddings.weight.shape
        self.dense = nn.Linear(d_model, d_model)
        self.LayerNorm = LayerNorm(d_model, eps=eps)
        self.decoder = nn.Linear(d_model, vocab_size)  # its bias is the output-only bias
        self.decoder.weight = word_embeddings.weight  # tied: W_out = E_word, (V, d)

    def forward(self, hidden: Tensor) -> Tensor:
        """``(..., d_model)`` -> ``(..., vocab_size)``."""
        h = self.LayerNorm(F.gelu(self.dense(hidden)))  # the transform, as in BERT
        return self.decoder(h)  # h @ E_word^T + bias


class NSPHead(nn.Module):
    """IsNext (0) / NotNext (1) logits from ``[CLS]``: ``seq_relationship(tanh(dense(h_0)))``."""

    def __init__(self, d_model: int):
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)  # the pooler
        self.seq_relationship = nn.Linear(d_model, 2)

    def forward(self, hidden: Tensor) -> Tensor:
        """``(B, T, d_model)`` -> ``(B, 2)``."""
        pooled = torch.tanh(self.dense(hidden[:, 0]))  # the [CLS] position
        return self.seq_relationship(pooled)


class ClassificationHead(nn.Module):
    """Sequence classification from ``[CLS]``: ``classifier(dropout(tanh(dense(h_0))))``."""

    def __init__(self, d_model: int, n_labels: int, dropout: float = 0.1):
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)  # the pooler
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d_model, n_labels)

    def forward(self, hidden: Tensor) -> Tensor:
        """``(B, T, d_model)`` -> ``(B, n_labels)``."""
        pooled = torch.tanh(self.dense(hidden[:, 0]))
        return self.classifier(self.dropout(pooled))


class TinyBert(nn.Module):
    """Embeddings, an :class:`~toolkit.residual.EncoderStack`, and the tied MLM head.

    ``forward`` returns the final hidden states; ``mlm_head`` turns any of them into
    vocabulary logits (apply it to the selected positions only: the output layer is
    the most expensive part of a small model with a large vocabulary).
    Weights are initialised as BERT's: normal with std 0.02, biases 0, norms 1 and 0.
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        if not isinstance(config, BertConfig):
            raise ValueError(f"config must be a BertConfig, got {type(config).__name__}")
        self.config = config
        self.embeddings = BertEmbeddings(config.vocab_size, config.d_model, config.max_seq_len,
                                         config.type_vocab_size, config.dropout, config.eps)
        self.encoder = EncoderStack(config.n_layers, config.d_model, config.n_heads, config.d_ff,
                                    norm_first=config.norm_first, dropout=config.dropout,
                                    eps=config.eps)
        self.mlm_head = MLMHead(self.embeddings.word_embeddings, eps=config.eps)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
                attention_mask: Tensor | None = None) -> Tensor:
        """Hidden states ``(B, T, d_model)``; ``attention_mask`` ``(B, T)`` is 1 for real
        tokens and 0 for padding (padded keys are hidden from every query)."""
        mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
        return self.encoder(self.embeddings(input_ids, token_type_ids), mask)


class BertClassifier(nn.Module):
    """BERT fine-tuned for sequence classification: a (pre-trained) encoder and a head on
    ``[CLS]``, as Hugging Face's ``BertForSequenceClassification``:
    ``classifier(dropout(tanh(dense(h_0))))``. Fine-tuning trains all the weights.

    Args:
        bert: the encoder, usually pre-trained (:func:`toolkit.pretrain.load_bert`).
        n_labels: number of classes.
        dropout: before the classifier.
    """

    def __init__(self, bert: TinyBert, n_labels: int, dropout: float = 0.1):
        super().__init__()
        check_int("n_labels", n_labels, minimum=2)
        d_model = bert.config.d_model
        self.bert = bert
        self.dense = nn.Linear(d_model, d_model)  # the pooler
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d_model, n_labels)
        for layer in (self.dense, self.classifier):  # BERT's initialisation
            nn.init.normal_(layer.weight, std=0.02)
            nn.init.zeros_(layer.bias)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
                attention_mask: Tensor | None = None) -> Tensor:
        """``(B, T)`` ids (and segment ids, padding mask) -> logits ``(B, n_labels)``."""
        hidden = self.bert(input_ids, token_type_ids, attention_mask)  # (B, T, d_model)
        pooled = torch.tanh(self.dense(hidden[:, 0]))  # the pooler reads [CLS], position 0
        return self.classifier(self.dropout(pooled))  # (B, n_labels)


def tied_parameter_names(model: nn.Module) -> list[str]:
    """State-dict names that share storage with an earlier name (the tied decoder)."""
    seen, tied = set(), []
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            tied.append(name)
        seen.add(id(tensor))
    return tied
