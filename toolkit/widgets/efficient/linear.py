"""Linear attention: the feature map, the running d x d state, and its error against softmax.

Linear attention (arXiv 2006.16236) replaces ``exp(q . k / sqrt d)`` by
``phi(q) . phi(k)``, so that a causal decoder keeps a state ``S_t = sum_{j<=t} phi(k_j)
v_j^T`` (``d x d_v``) and ``z_t = sum_{j<=t} phi(k_j)`` instead of a growing ``T x T``
score matrix. The widget shows, for a feature map of your choice, the state after ``t``
tokens, the numbers each form keeps, and how far the outputs drift from softmax
attention's as the sequence grows (the price of the approximation).
"""

from __future__ import annotations

import torch
from matplotlib.figure import Figure

from toolkit.attention import scaled_dot_product_attention
from toolkit.linear_attention import causal_linear_attention, elu_feature_map, linear_attention
from toolkit.masks import causal_mask
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

TOOLKIT_FUNCTIONS = {
    "linear_attention": linear_attention,
    "causal_linear_attention": causal_linear_attention,
}


def _relu_map(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) + 1e-6  # positive, so the normaliser never vanishes


def _exp_map(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(x - x.amax(dim=-1, keepdim=True))  # exp, shifted per vector for range


#: The feature maps ``phi`` offered, by label.
FEATURE_MAPS = {"elu(x) + 1": elu_feature_map, "relu(x)": _relu_map, "exp(x)": _exp_map}

#: The sequence lengths of the error curve.
LENGTHS = (16, 32, 64, 128, 256)


def _qkv(T: int, d: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(1, 1, T, d, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(1, 1, T, d, generator=g, dtype=torch.float64)
    return q, k, v


def linear_vs_softmax(feature: str = "elu(x) + 1", d: int = 16, seed: int = 0, *,
                      fns=None) -> dict[str, list[float]]:
    """Relative error ``|lin - softmax| / |softmax|`` of causal and non-causal linear
    attention against softmax attention, for each length in ``LENGTHS``; and the numbers
    each form keeps per head: ``T^2`` scores against ``d * d + d`` for ``S`` and ``z``."""
    f = widget_functions("linear_vs_softmax", fns, TOOLKIT_FUNCTIONS)
    phi = FEATURE_MAPS[feature]
    causal_err, full_err = [], []
    for T in LENGTHS:
        q, k, v = _qkv(T, d, seed)
        exact = scaled_dot_product_attention(q, k, v)
        exact_causal = scaled_dot_product_attention(q, k, v, causal_mask(T))
        full = f.linear_attention(q, k, v, feature_map=phi)
        causal = f.causal_linear_attention(q, k, v, feature_map=phi)
        full_err.append(float((full - exact).norm() / exact.norm()))
        causal_err.append(float((causal - exact_causal).norm() / exact_causal.norm()))
    return {"lengths": list(LENGTHS), "causal": causal_err, "full": full_err,
            "scores": [T * T for T in LENGTHS], "state": [d * d + d for _ in LENGTHS]}


def running_state(t: int, feature: str = "elu(x) + 1", d: int = 16, seed: int = 0) -> torch.Tensor:
    """``S_t = sum_{j <= t} phi(k_j) v_j^T``, ``(d, d)``, on the example of length 64."""
    q, k, v = _qkv(64, d, seed)
    phi_k = FEATURE_MAPS[feature](k)[0, 0, : t + 1]  # (t + 1, d)
    return phi_k.T @ v[0, 0, : t + 1]


def plot_linear_attention(feature="elu(x) + 1", t=8, d=16, seed=0, *, fns=None) -> Figure:
    """The running state S_t, the numbers kept per head, and the error against softmax."""
    r = linear_vs_softmax(feature, d, seed, fns=fns)
    fig = Figure(figsize=(13, 3.4), layout="constrained")
    ax_state, ax_size, ax_err = fig.subplots(1, 3)
    S = running_state(t, feature, d, seed)
    lim = float(S.abs().max()) or 1.0
    im = ax_state.imshow(S.numpy(), cmap="RdBu_r", vmin=-lim, vmax=lim)
    fig.colorbar(im, ax=ax_state, shrink=0.8)
    ax_state.set_title(f"state S_t after t = {t} tokens ({d} x {d}, its size never grows)",
                       fontsize=9)
    ax_state.set_xlabel("value feature")
    ax_state.set_ylabel("phi(key) feature")
    ax_size.loglog(r["lengths"], r["scores"], "o-", label="softmax: T x T scores")
    ax_size.loglog(r["lengths"], r["state"], "s-", label="linear: S (d x d) and z (d)")
    ax_size.set_xlabel("sequence length T")
    ax_size.set_ylabel("numbers kept per head")
    ax_size.legend(fontsize=8)
    ax_size.set_title("what each form keeps", fontsize=9)
    ax_err.plot(r["lengths"], r["causal"], "o-", label="causal")
    ax_err.plot(r["lengths"], r["full"], "s-", label="bidirectional")
    ax_err.set_xscale("log")
    ax_err.set_xlabel("sequence length T")
    ax_err.set_ylabel("|linear - softmax| / |softmax|")
    ax_err.legend(fontsize=8)
    ax_err.set_title(f"phi = {feature}: not softmax attention", fontsize=9)
    return fig


def linear_attention_explorer(*, fns=None):
    """A feature-map menu and sliders for the state's step ``t``, the width ``d`` and the seed.

    Args:
        fns: your ``linear_attention`` and ``causal_linear_attention`` in place of the
            toolkit's, e.g. ``fns={"linear_attention": linear_attention,
            "causal_linear_attention": causal_linear_attention}``.
    """
    f = widget_functions("linear_attention_explorer", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("linear_attention_explorer")
    import ipywidgets as w

    controls = {
        "feature": w.Dropdown(style=LABEL_STYLE, options=list(FEATURE_MAPS), value="elu(x) + 1",
                              description="feature map"),
        "t": w.IntSlider(style=LABEL_STYLE, value=8, min=0, max=63, description="step t"),
        "d": w.SelectionSlider(style=LABEL_STYLE, options=[4, 8, 16, 32], value=16,
                               description="d"),
        "seed": w.IntSlider(style=LABEL_STYLE, value=0, min=0, max=20, description="seed"),
    }

    def draw(feature, t, d, seed):
        return plot_linear_attention(feature, t, d, seed, fns=fns)

    def note(d, **_):
        return (f"Decoding the next token reads S and z: {d * d + d} numbers per head, whatever "
                "the context length; softmax attention reads all T cached keys and values.")

    return live_figure(controls, draw, note, functions=f)
