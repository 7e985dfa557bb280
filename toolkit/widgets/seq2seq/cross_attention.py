"""Where the decoder looks: cross-attention over the input, one row per decoded token."""

from __future__ import annotations

import torch
from matplotlib.figure import Figure
from torch import Tensor

from toolkit.seq2seq import greedy_decode
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

TOOLKIT_FUNCTIONS = {"greedy_decode": greedy_decode}


@torch.no_grad()
def cross_attention_maps(model, src: Tensor, output: Tensor) -> Tensor:
    """The cross-attention weights of every decoder layer and head while it writes ``output``.

    Runs the decoder once on ``[start] + output`` (teacher forcing gives the same weights as
    decoding token by token) and recomputes each layer's weights from the input its
    ``cross_attn`` receives: ``softmax(q k^T)`` over the real input tokens.

    Args:
        model: an encoder-decoder with ``encode``, ``decode`` and ``decoder_layers[i]
            .cross_attn`` (``q_proj``, ``k_proj``, ``split_heads``): the toolkit's or yours.
        src: ``(1, S)`` input ids.
        output: ``(n,)`` generated ids.

    Returns:
        ``(L, H, n, S)``: row ``t`` is where the decoder looked to write token ``t``.
    """
    seen = []

    def keep(module, args, kwargs):
        x = args[0]
        memory = args[1] if len(args) > 1 else kwargs["memory"]
        q = module.split_heads(module.q_proj(x))
        k = module.split_heads(module.k_proj(memory))
        seen.append((q, k))

    hooks = [layer.cross_attn.register_forward_pre_hook(keep, with_kwargs=True)
             for layer in model.decoder_layers]
    try:
        memory, src_mask = model.encode(src)
        start = output.new_full((1,), model.config.pad_id)
        model.decode(torch.cat([start, output[:-1]])[None], memory, src_mask)  # [start, y..]
    finally:
        for hook in hooks:
            hook.remove()
    maps = []
    for q, k in seen:
        scores = (q @ k.transpose(-2, -1)).masked_fill(~src_mask[:, None, None, :], float("-inf"))
        maps.append(torch.softmax(scores.double(), dim=-1)[0])  # (H, n, S)
    return torch.stack(maps).float()


def plot_cross_attention(weights: Tensor, inputs: list[str], outputs: list[str],
                         title: str = "") -> Figure:
    """Heatmap ``(n, S)``: rows are output tokens, columns input tokens."""
    fig = Figure(figsize=(max(4.0, 0.5 * len(inputs) + 2), max(2.5, 0.4 * len(outputs) + 1.2)),
                 layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(weights.numpy(), cmap="Blues", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(inputs)), inputs, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(outputs)), outputs, fontsize=8)
    ax.set_xlabel("input token (keys)")
    ax.set_ylabel("output token being written")
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, shrink=0.8, label="attention weight")
    return fig


def cross_attention_explorer(model, tokenizer, text: str = "words: 4213", *, fns=None):
    """Decode ``text`` greedily, then show each layer's and head's cross-attention.

    Args:
        model: a trained encoder-decoder (the toolkit's ``EncoderDecoder`` or yours).
        tokenizer: its tokenizer (``encode``, ``token_str``).
        text: the input; edit it in the box.
        fns: your ``greedy_decode`` in place of the toolkit's.

    Returns:
        an ``ipywidgets.VBox`` (a placeholder when headless).
    """
    f = widget_functions("cross_attention_explorer", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("cross_attention_explorer")
    import ipywidgets as w

    model.eval()
    controls = {
        "text": w.Text(value=text, description="input"),
        "layer": w.IntSlider(style=LABEL_STYLE, value=len(model.decoder_layers) - 1, min=0,
                             max=len(model.decoder_layers) - 1, description="layer"),
        "head": w.IntSlider(style=LABEL_STYLE, value=0, min=0, max=model.config.n_heads - 1,
                            description="head"),
    }
    last: dict = {"text": None}

    def draw(text, layer, head):
        if last["text"] != text:
            src = torch.tensor([tokenizer.encode(text)])
            out = f.greedy_decode(model, src, 16)[0]
            ids = out.tolist()
            eos = model.config.eos_id
            out = out[: ids.index(eos) + 1 if eos in ids else len(ids)]  # up to </s>
            last.update(text=text, src=src, out=out,
                        maps=cross_attention_maps(model, src, out))
        src, out = last["src"], last["out"]
        inputs = [tokenizer.token_str(int(i)) for i in src[0]]
        outputs = [tokenizer.token_str(int(i)) for i in out]
        return plot_cross_attention(last["maps"][layer, head], inputs, outputs,
                                    f"decoder layer {layer}, head {head}")

    def note(**_):
        return ("Each row sums to 1 over the input. Converting between digits and words, "
                "a trained model's heads follow the digit each word comes from.")

    return live_figure(controls, draw, note, functions=f)
