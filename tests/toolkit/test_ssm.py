"""toolkit.ssm: ZOH (diagonal = Van Loan), recurrent = convolutional, sequential = parallel
selective scan (= Hugging Face's), causality, and the Mamba mixer (= Hugging Face's
MambaMixer) with a constant-size step."""

from __future__ import annotations

import pytest
import torch

from toolkit.ssm import (
    MambaMixer,
    associative_scan,
    discretize_simplified,
    discretize_zoh,
    discretize_zoh_matrix,
    selective_scan,
    selective_scan_parallel,
    selective_step,
    ssm_convolutional,
    ssm_kernel,
    ssm_recurrent,
)


def _randn(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _lti(H=3, N=4, seed=0):
    A = -torch.rand(H, N, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) - 0.1
    return A, _randn(H, N, seed=seed + 1), _randn(H, N, seed=seed + 2), _randn(H, seed=seed + 3)


def _selective(batch=2, L=9, d=5, N=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(batch, L, d, generator=g, dtype=torch.float64)
    delta = torch.rand(batch, L, d, generator=g, dtype=torch.float64) + 0.05
    A_log = torch.randn(d, N, generator=g, dtype=torch.float64) * 0.5
    B = torch.randn(batch, L, N, generator=g, dtype=torch.float64)
    C = torch.randn(batch, L, N, generator=g, dtype=torch.float64)
    return u, delta, A_log, B, C, torch.randn(d, generator=g, dtype=torch.float64)


# ---------------------------------------------------------------------------- LTI


def test_zoh_diagonal_equals_van_loan_matrix_exponential():
    A, B, _, _ = _lti()
    delta = torch.tensor([0.05, 0.4, 1.5], dtype=torch.float64)
    A_bar, B_bar = discretize_zoh(delta, A, B)
    for h in range(3):
        A_m, B_m = discretize_zoh_matrix(float(delta[h]), torch.diag(A[h]), B[h][:, None])
        torch.testing.assert_close(A_bar[h], torch.diag(A_m))
        torch.testing.assert_close(B_bar[h], B_m[:, 0])


def test_zoh_is_exact_for_a_constant_input():
    # h(delta) for h(0) = 0 and u = 1 solves h' = a h + b: (e^{a delta} - 1) b / a.
    a, b = torch.tensor([-0.7], dtype=torch.float64), torch.tensor([2.0], dtype=torch.float64)
    delta = 0.3
    _, B_bar = discretize_zoh(delta, a, b)
    torch.testing.assert_close(B_bar, (torch.exp(a * delta) - 1) * b / a)
    # Mamba's simplification delta * B is only first-order accurate: close for small steps.
    _, B_euler = discretize_simplified(1e-4, a, b)
    _, B_exact = discretize_zoh(1e-4, a, b)
    torch.testing.assert_close(B_euler, B_exact, rtol=1e-4, atol=0)
    assert not torch.allclose(discretize_simplified(0.5, a, b)[1], discretize_zoh(0.5, a, b)[1])


def test_zoh_rejects_bad_input():
    with pytest.raises(ValueError, match="delta"):
        discretize_zoh(0.0, -torch.ones(2), torch.ones(2))
    with pytest.raises(ValueError, match="A has zero"):
        discretize_zoh(0.1, torch.zeros(2), torch.ones(2))
    with pytest.raises(ValueError, match="A must be"):
        discretize_zoh_matrix(0.1, torch.ones(2, 3), torch.ones(2, 1))


@pytest.mark.parametrize("with_D", [True, False])
def test_recurrent_equals_convolutional(with_D):
    A, B, C, D = _lti()
    A_bar, B_bar = discretize_zoh(torch.tensor([0.1, 0.5, 1.0], dtype=torch.float64), A, B)
    u = _randn(2, 33, 3, seed=9)
    D = D if with_D else None
    torch.testing.assert_close(ssm_convolutional(A_bar, B_bar, C, D, u),
                               ssm_recurrent(A_bar, B_bar, C, D, u), atol=1e-10, rtol=1e-8)


def test_kernel_is_the_impulse_response_and_state_carries_over():
    A, B, C, _ = _lti(seed=4)
    A_bar, B_bar = discretize_zoh(0.3, A, B)
    impulse = torch.zeros(1, 12, 3, dtype=torch.float64)
    impulse[:, 0] = 1.0
    K = ssm_kernel(A_bar, B_bar, C, 12)
    torch.testing.assert_close(ssm_recurrent(A_bar, B_bar, C, None, impulse)[0].T, K)
    u = _randn(2, 10, 3, seed=5)
    y1, h = ssm_recurrent(A_bar, B_bar, C, None, u[:, :4], return_state=True)
    y2 = ssm_recurrent(A_bar, B_bar, C, None, u[:, 4:], state=h)
    torch.testing.assert_close(torch.cat([y1, y2], 1), ssm_recurrent(A_bar, B_bar, C, None, u))


# ---------------------------------------------------------------------------- selective


@pytest.mark.parametrize("L", [1, 2, 7, 16, 19])
def test_associative_scan_equals_the_loop(L):
    a = torch.rand(3, L, 4, dtype=torch.float64)
    b = _randn(3, L, 4, seed=L)
    h, expected = torch.zeros(3, 4, dtype=torch.float64), []
    for t in range(L):
        h = a[:, t] * h + b[:, t]
        expected.append(h)
    torch.testing.assert_close(associative_scan(a, b, dim=1), torch.stack(expected, 1))


def test_selective_scan_sequential_equals_parallel_and_steps():
    u, delta, A_log, B, C, D = _selective()
    y, h = selective_scan(u, delta, A_log, B, C, D, return_state=True)
    torch.testing.assert_close(selective_scan_parallel(u, delta, A_log, B, C, D), y)
    state = torch.zeros_like(h)
    for t in range(u.size(1)):
        y_t, state = selective_step(state, u[:, t], delta[:, t], A_log, B[:, t], C[:, t], D)
        torch.testing.assert_close(y_t, y[:, t])
    torch.testing.assert_close(state, h)


def test_selective_scan_equals_hugging_face_reference():
    mamba = pytest.importorskip("transformers.models.mamba.modeling_mamba")
    # float32: Hugging Face's reference casts B to float32.
    u, delta_raw, A_log, B, C, D = (t.float() for t in _selective(seed=1))
    delta = torch.nn.functional.softplus(delta_raw)
    expected = mamba.mamba_selective_scan(  # Hugging Face's layout: (batch, channels, L)
        u.transpose(1, 2), delta_raw.transpose(1, 2), -torch.exp(A_log), B.transpose(1, 2),
        C.transpose(1, 2), D=D, delta_softplus=True)
    torch.testing.assert_close(selective_scan(u, delta, A_log, B, C, D), expected.transpose(1, 2),
                               atol=1e-6, rtol=1e-5)


def test_selective_scan_with_constant_parameters_is_the_lti_ssm():
    u, delta, A_log, B, C, D = _selective(batch=1, seed=2)
    delta = delta[:, :1].expand_as(delta)  # the same step, B and C at every position
    B, C = B[:, :1].expand_as(B), C[:, :1].expand_as(C)
    A_bar, B_bar = discretize_simplified(delta[0, 0], -torch.exp(A_log), B[0, 0].expand_as(A_log))
    expected = ssm_recurrent(A_bar, B_bar, C[0, 0].expand_as(A_log), D, u)
    torch.testing.assert_close(selective_scan(u, delta, A_log, B, C, D), expected)


def test_selective_scan_is_causal():
    u, delta, A_log, B, C, D = _selective(L=10, seed=3)
    base = selective_scan(u, delta, A_log, B, C, D)
    changed = [t.clone() for t in (u, delta, B, C)]
    for t in changed:
        t[:, 6:] += 1.0
    moved = selective_scan(changed[0], changed[1], A_log, changed[2], changed[3], D)
    torch.testing.assert_close(moved[:, :6], base[:, :6], atol=0, rtol=0)
    assert not torch.allclose(moved[:, 6:], base[:, 6:])


# ---------------------------------------------------------------------------- Mamba block


def _hf_mixer(**overrides):
    transformers = pytest.importorskip("transformers")
    mamba = pytest.importorskip("transformers.models.mamba.modeling_mamba")
    config = dict(hidden_size=16, state_size=8, conv_kernel=4, expand=2, time_step_rank=3)
    cfg = transformers.MambaConfig(**{**config, **overrides})
    torch.manual_seed(0)
    return mamba.MambaMixer(cfg, layer_idx=0).eval()


@pytest.mark.parametrize("bias", [False, True])
def test_mamba_mixer_equals_hugging_face(bias):
    theirs = _hf_mixer(use_bias=bias)
    with torch.no_grad():  # make every parameter matter
        for p in theirs.parameters():
            p.add_(0.1 * torch.randn_like(p))
    ours = MambaMixer(16, d_state=8, d_conv=4, expand=2, dt_rank=3, bias=bias).eval()
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 11, 16)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-6, rtol=1e-5)


def test_mamba_step_equals_forward_with_a_constant_cache():
    torch.manual_seed(1)
    mixer = MambaMixer(12, d_state=6, d_conv=3, expand=2).double().eval()
    x = _randn(2, 10, 12, seed=6)
    with torch.no_grad():
        full = mixer(x)
        cache = mixer.empty_cache(2)
        size = cache.nbytes()
        steps = []
        for t in range(10):
            y, cache = mixer.step(x[:, t], cache)
            steps.append(y)
            assert cache.nbytes() == size  # constant memory, whatever the context length
        torch.testing.assert_close(torch.stack(steps, 1), full)
        # Prefill two tokens (shorter than the convolution), then step.
        head, cache = mixer(x[:, :2], return_cache=True)
        rest = [mixer.step(x[:, t], cache := cache)[0] for t in range(2, 3)]
        torch.testing.assert_close(torch.cat([head, rest[0][:, None]], 1), full[:, :3])


def test_mamba_mixer_is_causal():
    torch.manual_seed(2)
    mixer = MambaMixer(8, d_state=4).double()
    x = _randn(1, 9, 8, seed=7)
    x2 = x.clone()
    x2[:, 5:] += 1.0
    with torch.no_grad():
        torch.testing.assert_close(mixer(x2)[:, :5], mixer(x)[:, :5], atol=0, rtol=0)
