"""Fixtures of the toolkit tests: assignment 05's classes stubbed as the student build
stubs them while 05 is open, and the widgets' display modes."""

from __future__ import annotations

import pytest
from torch import nn

from toolkit.norm import LayerNorm
from toolkit.residual import PostLNBlock, PreLNBlock


class OwnBlock(nn.Module):
    """A notebook's own block, built from no toolkit class: ``x + W x``."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        return x + self.proj(x)


@pytest.fixture
def blocks_stubbed(monkeypatch):
    """The toolkit's ``LayerNorm``, ``PostLNBlock`` and ``PreLNBlock`` raise when built, as
    their stubs do; returns :class:`OwnBlock`, a block that needs none of them."""

    def stubbed(*args, **kwargs):
        raise NotImplementedError("the toolkit's class was used")

    for cls in (LayerNorm, PostLNBlock, PreLNBlock):
        monkeypatch.setattr(cls, "__init__", stubbed)
    return OwnBlock


# -- widgets (the helpers that are not fixtures: widget_testing.py) ---------------------------
@pytest.fixture
def interactive(monkeypatch):
    """Widgets draw as they would in a notebook (no headless switch)."""
    from toolkit.widgets.display import HEADLESS_ENV

    monkeypatch.delenv(HEADLESS_ENV, raising=False)


@pytest.fixture
def headless(monkeypatch):
    """Widgets draw nothing interactive (``TOOLKIT_HEADLESS=1``, as in the tests of notebooks)."""
    from toolkit.widgets.display import HEADLESS_ENV

    monkeypatch.setenv(HEADLESS_ENV, "1")
