"""Argument checks shared by the toolkit and the course notebooks.

Bad input should fail at once, with a ``ValueError`` that names the argument, says
what was expected and shows what came in, rather than deep inside a matrix product
with a shape error nobody can trace back. Every check here does exactly that and
returns nothing when the argument is fine. The toolkit's references call them, and so
do the notebook exercises that are copies of those references, so a student's
function refuses bad input with the same message as the toolkit's.

Sections, one module each: :mod:`.numbers` (numbers, positional-encoding settings),
:mod:`.attention` (attention tensors, Transformer blocks), :mod:`.blocks` (norms,
feed-forward networks, masked language modelling, distillation), :mod:`.beyond`
(experts and recurrent layers); import every name from here. Tensor shapes follow the
toolkit: attention tensors ``(B, H, T, d)``, module inputs ``(B, T, d_model)``.
"""

from .attention import (  # noqa: F401
    BLOCK_ACTIVATIONS,
    check_block_args,
    check_bool_mask,
    check_flash_backward_inputs,
    check_flash_inputs,
    check_kv_heads,
    check_qkv,
    check_sequence,
)
from .beyond import (  # noqa: F401
    GATINGS,
    check_capacity_factor,
    check_dispatch_inputs,
    check_gating,
    check_routing,
    check_selective_inputs,
    check_ssd_inputs,
    check_step_sizes,
    check_top_k,
    check_wkv_inputs,
    check_zoh_inputs,
)
from .blocks import (  # noqa: F401
    check_activation,
    check_eps,
    check_features,
    check_mlm_probabilities,
    check_same_shape,
    check_temperature,
    check_token_ids,
)
from .numbers import (  # noqa: F401
    ROPE_LAYOUTS,
    check_context_scale,
    check_dropout,
    check_even,
    check_frequency_base,
    check_int,
    check_rope_layout,
)
