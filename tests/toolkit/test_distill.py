"""toolkit.distill: the losses against their definitions and PyTorch, and why T^2."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from toolkit.distill import distillation_loss, hidden_cosine_loss, soft_target_loss


def _logits(*shape, seed=0, scale=2.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64) * scale


def _kl(p, q):
    """KL(p || q) summed over the last axis, from the definition."""
    return (p * (p.log() - q.log())).sum(-1)


@pytest.mark.parametrize("T", [0.5, 1.0, 2.0, 8.0])
def test_soft_target_loss_is_t2_times_kl_teacher_student(T):
    s, t = _logits(6, 10, seed=1), _logits(6, 10, seed=2)
    expected = T**2 * _kl(torch.softmax(t / T, -1), torch.softmax(s / T, -1)).mean()
    torch.testing.assert_close(soft_target_loss(s, t, T), expected)
    swapped = T**2 * _kl(torch.softmax(s / T, -1), torch.softmax(t / T, -1)).mean()
    assert not torch.allclose(soft_target_loss(s, t, T), swapped)  # KL is not symmetric


def test_soft_target_loss_averages_over_every_position():
    s, t = _logits(2, 3, 7, seed=3), _logits(2, 3, 7, seed=4)
    torch.testing.assert_close(soft_target_loss(s, t, 2.0),
                               soft_target_loss(s.reshape(6, 7), t.reshape(6, 7), 2.0))
    assert soft_target_loss(t, t, 3.0).abs() < 1e-12  # zero when they agree
    with pytest.raises(ValueError, match="same shape"):
        soft_target_loss(s, t[..., :5], 1.0)
    with pytest.raises(ValueError, match="temperature"):
        soft_target_loss(s, t, 0.0)


def test_t_squared_keeps_the_gradient_scale():
    """The gradient of KL falls like 1/T^2; that of T^2 KL stays put (the docstring's claim)."""
    t = _logits(64, 20, seed=5)
    norms, raw = [], []
    for T in (2.0, 4.0, 8.0, 16.0):
        s = _logits(64, 20, seed=6).requires_grad_(True)
        (g,) = torch.autograd.grad(soft_target_loss(s, t, T), s)
        norms.append(g.norm().item())
        raw.append(g.norm().item() / T**2)
    assert max(norms) / min(norms) < 2.0
    assert raw[0] / raw[-1] > 40  # without T^2: 64 times smaller at T = 16 than at T = 2


def test_hidden_cosine_loss():
    hs, ht = _logits(2, 5, 8, seed=7), _logits(2, 5, 8, seed=8)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    cos = F.cosine_similarity(hs, ht, dim=-1)
    torch.testing.assert_close(hidden_cosine_loss(hs, ht), (1 - cos).mean())
    torch.testing.assert_close(hidden_cosine_loss(hs, ht, mask), (1 - cos[mask.bool()]).mean())
    # PyTorch's CosineEmbeddingLoss with target 1 (DistilBERT's choice) is the same thing.
    ref = torch.nn.CosineEmbeddingLoss()(hs.reshape(-1, 8), ht.reshape(-1, 8), torch.ones(10))
    torch.testing.assert_close(hidden_cosine_loss(hs, ht), ref)
    assert hidden_cosine_loss(hs, 3.0 * hs).abs() < 1e-12  # scale-free


def test_distillation_loss_mixes_the_three_terms_on_labelled_rows():
    s, t = _logits(2, 4, 9, seed=9), _logits(2, 4, 9, seed=10)
    labels = torch.tensor([[3, -100, 1, -100], [-100, 8, 0, -100]])
    hs, ht = _logits(2, 4, 6, seed=11), _logits(2, 4, 6, seed=12)
    keep = labels != -100
    soft = soft_target_loss(s[keep], t[keep], 3.0)
    hard = F.cross_entropy(s[keep], labels[keep])
    cos = hidden_cosine_loss(hs, ht)
    got = distillation_loss(s, t, labels, 3.0, 5.0, 2.0, 1.0, hs, ht)
    torch.testing.assert_close(got, 5.0 * soft + 2.0 * hard + 1.0 * cos)
    torch.testing.assert_close(distillation_loss(s, t, labels), 0.5 * soft_target_loss(
        s[keep], t[keep], 2.0) + 0.5 * hard)
    s.requires_grad_(True)
    t.requires_grad_(True)
    distillation_loss(s, t, labels).backward()
    assert t.grad is None and s.grad is not None  # the teacher is never trained
    with pytest.raises(ValueError, match="alpha_cos"):
        distillation_loss(s, t, labels, alpha_cos=1.0)
