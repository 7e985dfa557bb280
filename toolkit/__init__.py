"""Reference implementations of the Transformer components taught in the course.

Each module covers one concept and reads top to bottom like a textbook section:
the formula sits next to the line that computes it, tensor shapes are in the
docstrings, and papers are cited by arXiv id.

Conventions used across the whole package
-----------------------------------------
* Attention tensors are laid out ``(batch, heads, seq, d_head)``; module inputs and
  outputs are ``(batch, seq, d_model)``.
* Boolean masks follow :func:`torch.nn.functional.scaled_dot_product_attention`:
  ``True`` means "this query may attend to this key". Float masks are *added* to
  the scores. (Note that ``torch.nn.MultiheadAttention``'s ``key_padding_mask`` uses
  the opposite sense; :mod:`toolkit.masks` converts explicitly.)
* A query row whose keys are all masked returns zeros, never NaN (see
  :func:`toolkit.attention.scaled_dot_product_attention`).
"""

__version__ = "0.1.0"
