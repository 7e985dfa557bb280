"""Knowledge distillation: a small student learns from a trained teacher's soft targets.

A trained model's output distribution says more than its top answer: after "the cat
sat on the", a teacher that gives "mat" 0.6, "floor" 0.2 and "sofa" 0.1 tells the
student which mistakes are reasonable. Hinton et al. (arXiv 1503.02531) train the
student to match these *soft targets*, softened by a temperature ``T`` so that the
small probabilities carry signal; DistilBERT (arXiv 1910.01108) distils BERT into a
model with half the layers, 40% smaller and 60% faster, keeping 97% of its GLUE score.

The loss (DistilBERT's three terms)::

    L = alpha_soft * T^2 * KL( softmax(z_t / T) || softmax(z_s / T) )    soft targets
      + alpha_hard * CE(z_s, labels)                                    the true labels
      + alpha_cos  * mean(1 - cos(h_s, h_t))                            hidden states

* ``KL(p || q) = sum_i p_i (log p_i - log q_i)`` with the *teacher* first: the student is
  penalised for putting little mass where the teacher puts much. PyTorch's
  ``F.kl_div(input, target)`` computes ``KL(target || exp(input))`` and wants ``input``
  as **log**-probabilities: ``F.kl_div(log_softmax(z_s / T), softmax(z_t / T))``.
* ``reduction="batchmean"`` divides the sum by the number of rows, which is the true KL
  averaged over positions only when the logits are flattened to ``(rows, V)`` first
  (``"mean"`` would also divide by ``V``).
* Rows are the positions with a label (``labels != -100``; for masked-LM training the
  selected tokens); the cosine term uses every real token. (DistilBERT's training script
  limits its soft term to those tokens only with ``--restrict_ce_to_mask``; by default
  it uses every real token.)

Why ``T^2``? Write ``p = softmax(z_s / T)`` and ``q = softmax(z_t / T)``. The gradient of
``KL(q || p)`` with respect to the student's logit ``z_s,i`` is::

    d KL / d z_s,i = (p_i - q_i) / T

For ``T`` larger than the spread of the logits, ``softmax(z / T)_i ~ (1 + (z_i - mean(z)) / T) / V``
(first-order Taylor), so ``p_i - q_i ~ ((z_s,i - mean z_s) - (z_t,i - mean z_t)) / (V T)``
and::

    d KL / d z_s,i ~ ((z_s,i - mean z_s) - (z_t,i - mean z_t)) / (V T^2)

The soft term's gradients shrink like ``1 / T^2``. Multiplying it by ``T^2`` keeps them
at the same scale whatever the temperature, so ``alpha_soft`` and ``alpha_hard`` keep
the balance they were chosen for when ``T`` changes (tested: the gradient norm of
``T^2 KL`` stays within a small factor for ``T`` from 2 to 16, that of ``KL`` falls by
about 64).

The student: :func:`student_from_teacher` copies the teacher's embeddings, head and
every other block (DistilBERT's initialisation), :func:`distill` trains it.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from toolkit.arguments import check_int, check_same_shape, check_temperature
from toolkit.bert import TinyBert
from toolkit.mlm import IGNORE_INDEX, MaskedLMDataset
from toolkit.pretrain import MLMCorpus


def soft_target_loss(student_logits: Tensor, teacher_logits: Tensor, temperature: float) -> Tensor:
    """``T^2 * KL(softmax(z_t / T) || softmax(z_s / T))``, averaged over rows.

    Args:
        student_logits, teacher_logits: ``(..., V)``; every leading position is a row.
        temperature: ``T > 0``.

    Returns:
        a scalar tensor (differentiable with respect to the student's logits).
    """
    check_same_shape("student_logits", student_logits, "teacher_logits", teacher_logits)
    check_temperature(temperature)
    V = student_logits.size(-1)
    log_p_student = F.log_softmax(student_logits.reshape(-1, V) / temperature, dim=-1)
    p_teacher = F.softmax(teacher_logits.reshape(-1, V) / temperature, dim=-1)
    kl = F.kl_div(log_p_student, p_teacher, reduction="batchmean")  # KL(teacher || student)
    return kl * temperature**2  # T^2 keeps the gradient scale independent of T


def hidden_cosine_loss(student_hidden: Tensor, teacher_hidden: Tensor,
                       attention_mask: Tensor | None = None) -> Tensor:
    """``mean(1 - cos(h_s, h_t))`` over positions (only real ones if ``attention_mask``).

    Shapes: hidden states ``(B, T, d)`` (same ``d``: DistilBERT keeps the width),
    ``attention_mask`` ``(B, T)`` with 1 for real tokens.
    """
    check_same_shape("student_hidden", student_hidden, "teacher_hidden", teacher_hidden)
    cos = F.cosine_similarity(student_hidden, teacher_hidden, dim=-1)  # (B, T)
    if attention_mask is not None:
        cos = cos[attention_mask.bool()]
    return (1.0 - cos).mean()


def distillation_loss(
    student_logits: Tensor,
    teacher_logits: Tensor,
    labels: Tensor,
    temperature: float = 2.0,
    alpha_soft: float = 0.5,
    alpha_hard: float = 0.5,
    alpha_cos: float = 0.0,
    student_hidden: Tensor | None = None,
    teacher_hidden: Tensor | None = None,
    attention_mask: Tensor | None = None,
) -> Tensor:
    """DistilBERT's loss: soft targets, hard labels and (optionally) hidden-state cosine.

    Args:
        student_logits, teacher_logits: ``(..., V)``.
        labels: ``(...)`` class ids, ``-100`` where there is nothing to predict; the soft
            and hard terms use the rows with a label.
        temperature: softens both distributions in the soft term (the hard term uses
            ``T = 1``).
        alpha_soft, alpha_hard, alpha_cos: the weights of the three terms.
        student_hidden, teacher_hidden, attention_mask: for the cosine term (needed
            when ``alpha_cos > 0``).

    Returns:
        a scalar tensor.
    """
    selected = labels != IGNORE_INDEX
    s, t = student_logits[selected], teacher_logits[selected]  # (n_selected, V)
    loss = alpha_soft * soft_target_loss(s, t.detach(), temperature)
    loss = loss + alpha_hard * F.cross_entropy(s, labels[selected])
    if alpha_cos:
        if student_hidden is None or teacher_hidden is None:
            raise ValueError("alpha_cos > 0 needs student_hidden and teacher_hidden")
        loss = loss + alpha_cos * hidden_cosine_loss(student_hidden, teacher_hidden.detach(),
                                                     attention_mask)
    return loss


def student_from_teacher(teacher: TinyBert, keep_every: int = 2) -> TinyBert:
    """A copy of ``teacher`` with blocks ``0, keep_every, 2 keep_every, ...`` only.

    DistilBERT's initialisation: same width, embeddings and head, half the layers.
    """
    check_int("keep_every", keep_every)
    student = copy.deepcopy(teacher)
    kept = [student.encoder.layers[i] for i in range(0, len(student.encoder.layers), keep_every)]
    student.encoder.layers = nn.ModuleList(kept)
    student.config = dataclasses.replace(student.config, n_layers=len(kept))
    return student


def distill(
    teacher: TinyBert, student: TinyBert, corpus: MLMCorpus, steps: int, *,
    temperature: float = 2.0, alpha_soft: float = 0.5, alpha_hard: float = 0.5,
    alpha_cos: float = 0.0, batch_size: int = 32, lr: float = 2e-3, seed: int = 0,
    loss_fn: Callable[..., Tensor] = distillation_loss,
    masking: MaskedLMDataset | None = None,
    callback: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Train ``student`` on dynamically masked batches against ``teacher``; returns losses.

    AdamW with a short warm-up and cosine decay, gradients clipped at 1; the teacher is
    frozen (eval mode, no gradients). ``loss_fn`` defaults to :func:`distillation_loss`;
    ``masking`` serves the masked batches (default: dynamic masking of
    ``corpus.train_ids`` seeded with ``seed``; a notebook passes its own
    ``MaskedLMDataset``, as to :func:`toolkit.pretrain.pretrain`).
    """
    v = corpus.vocab
    if masking is None:
        masking = MaskedLMDataset(corpus.train_ids, v.special_ids, v.mask_id, v.vocab_size,
                                  seed=seed)
    optimizer = torch.optim.AdamW(student.parameters(), lr=lr, weight_decay=0.01)
    generator = torch.Generator().manual_seed(seed)
    teacher.eval()
    student.train()
    losses = []
    for step in range(steps):
        ramp = min(1.0, (step + 1) / max(1, steps // 10))
        scale = ramp * 0.5 * (1 + math.cos(math.pi * step / steps))
        for group in optimizer.param_groups:
            group["lr"] = lr * scale
        indices = torch.randint(len(masking), (batch_size,), generator=generator)
        inputs, labels = masking.batch(indices)
        types = corpus.train_types[indices]
        selected = labels != IGNORE_INDEX
        with torch.no_grad():
            t_hidden = teacher(inputs, types)
            t_logits = teacher.mlm_head(t_hidden[selected])
        s_hidden = student(inputs, types)
        s_logits = student.mlm_head(s_hidden[selected])
        loss = loss_fn(s_logits, t_logits, labels[selected], temperature, alpha_soft, alpha_hard,
                       alpha_cos, s_hidden, t_hidden)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if callback is not None:
            callback(step, losses[-1])
    student.eval()
    return losses
