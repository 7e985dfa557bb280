"""toolkit.ssm.duality: Mamba-2's three forms of one scalar-decay SSM agree (recurrent =
masked attention = chunked, for every chunk size), the mask equals Hugging Face's Mamba-2
segment sum, is 1-semiseparable and causal, and Mamba's selective scan with a scalar A per
channel is the same computation."""

from __future__ import annotations

import pytest
import torch

from toolkit.ssm import (
    selective_scan,
    semiseparable_mask,
    ssd_attention,
    ssd_chunked,
    ssd_recurrent,
)


def _inputs(batch=2, L=11, H=3, P=4, N=5, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, L, H, P, generator=g, dtype=dtype)
    log_a = -torch.rand(batch, L, H, generator=g, dtype=dtype) * 0.8
    B = torch.randn(batch, L, H, N, generator=g, dtype=dtype)
    C = torch.randn(batch, L, H, N, generator=g, dtype=dtype)
    return x, log_a, B, C


def test_mask_is_the_product_of_decays_between_the_steps():
    log_a = -torch.rand(7, dtype=torch.float64)
    a = log_a.exp()
    mask = semiseparable_mask(log_a)
    for i in range(7):
        for j in range(7):
            expected = torch.prod(a[j + 1: i + 1]).item() if j <= i else 0.0  # a_i ... a_{j+1}
            assert mask[i, j].item() == pytest.approx(expected, abs=1e-14)


def test_mask_equals_hugging_face_segment_sum():
    from transformers.models.mamba2.modeling_mamba2 import segment_sum

    log_a = -torch.rand(2, 3, 9, dtype=torch.float64)
    torch.testing.assert_close(semiseparable_mask(log_a), torch.exp(segment_sum(log_a)))


def test_mask_is_one_semiseparable():
    """Every block on or below the diagonal has rank 1."""
    mask = semiseparable_mask(-torch.rand(10, dtype=torch.float64))
    for cut in range(1, 10):
        block = mask[cut:, :cut]  # rows after the cut, columns before it
        assert torch.linalg.matrix_rank(block).item() == 1


def test_mask_survives_long_sequences():
    """Segment sums, not ratios of cumulative products: no 0 / 0 after thousands of steps."""
    mask = semiseparable_mask(torch.full((3000,), -1.0))
    assert torch.isfinite(mask).all()
    assert mask[2999, 2998].item() == pytest.approx(torch.exp(torch.tensor(-1.0)).item())


@pytest.mark.parametrize("chunk_size", [1, 3, 4, 11, 16])
def test_three_forms_agree(chunk_size):
    x, log_a, B, C = _inputs()
    y, h = ssd_recurrent(x, log_a, B, C, return_state=True)
    torch.testing.assert_close(ssd_attention(x, log_a, B, C), y)
    y_chunked, h_chunked = ssd_chunked(x, log_a, B, C, chunk_size, return_state=True)
    torch.testing.assert_close(y_chunked, y)
    torch.testing.assert_close(h_chunked, h)


def test_state_carries_over_a_split_sequence():
    x, log_a, B, C = _inputs(L=12)
    y = ssd_recurrent(x, log_a, B, C)
    y1, h1 = ssd_chunked(x[:, :5], log_a[:, :5], B[:, :5], C[:, :5], 2, return_state=True)
    y2 = ssd_chunked(x[:, 5:], log_a[:, 5:], B[:, 5:], C[:, 5:], 3, state=h1)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y)
    _, h_rec = ssd_recurrent(x[:, :5], log_a[:, :5], B[:, :5], C[:, :5], return_state=True)
    torch.testing.assert_close(ssd_recurrent(x[:, 5:], log_a[:, 5:], B[:, 5:], C[:, 5:],
                                             state=h_rec), y2)


def test_causal():
    x, log_a, B, C = _inputs(L=9)
    y = ssd_attention(x, log_a, B, C)
    moved = [t.clone() for t in (x, log_a, B, C)]
    for t in moved:
        t[:, 6:] -= 0.5
    torch.testing.assert_close(ssd_attention(*moved)[:, :6], y[:, :6])
    torch.testing.assert_close(ssd_chunked(*moved, 4)[:, :6], y[:, :6])


def test_selective_scan_with_a_scalar_decay_is_the_masked_attention():
    """Mamba's scan, A constant over the state axis: H = d_inner heads of P = 1, x = delta u,
    log_a = delta A, B and C shared by the heads."""
    g = torch.Generator().manual_seed(3)
    L, d_inner, N = 10, 4, 3
    u = torch.randn(1, L, d_inner, generator=g, dtype=torch.float64)
    delta = torch.rand(1, L, d_inner, generator=g, dtype=torch.float64) + 0.1
    A_log = torch.randn(d_inner, 1, generator=g, dtype=torch.float64).expand(d_inner, N)
    B = torch.randn(1, L, N, generator=g, dtype=torch.float64)
    C = torch.randn(1, L, N, generator=g, dtype=torch.float64)
    A = -A_log[:, 0].exp()
    heads = (1, L, d_inner, N)
    y = ssd_attention((delta * u)[..., None], delta * A, B[:, :, None].expand(heads),
                      C[:, :, None].expand(heads))
    torch.testing.assert_close(y[..., 0], selective_scan(u, delta, A_log.contiguous(), B, C))


def test_rejects_bad_shapes():
    x, log_a, B, C = _inputs()
    with pytest.raises(ValueError, match="log_a"):
        ssd_attention(x, log_a[..., :1], B, C)
    with pytest.raises(ValueError, match="B and C"):
        ssd_recurrent(x, log_a, B, C[..., :2])
    with pytest.raises(ValueError, match="chunk_size"):
        ssd_chunked(x, log_a, B, C, 0)
