"""Forbidden shortcuts are banned by identity, not by the import path the student used.

The kernel side of the check protocol (:mod:`autograder.protocol.kernel_side`) runs here in the
test process, on a namespace that plays the student's: the same code the grading
kernel executes, driven through real request files. Every module touched is restored
after each request.
"""

from __future__ import annotations

import json
import sys
import types

import pytest
import torch
from safetensors.torch import save_file

import toolkit.models  # noqa: F401 - loaded, so its alias of apply_rope exists
import toolkit.position
from autograder.protocol import kernel_side
from autograder.protocol import trusted as protocol
from autograder.workspace.assignment_spec import AssignmentSpec

STUDENT = """
import torch
import toolkit.position as P
from torch.nn.functional import softmax as soft
from toolkit.models import attention as model_attention
from toolkit.position.rope import apply_rope as rotate

def via_alias(x, pos):
    return rotate(x, pos)

def via_package(x, pos):
    return P.apply_rope(x, pos)

def via_defining_module(x, pos):
    return P.rope.apply_rope(x, pos)

def via_other_module(x, pos):
    return model_attention.apply_rope(x, pos)

def own(x, pos):
    return x * 2

def via_torch_alias(x, pos):
    return soft(x, -1)
"""

APPLY_ROPE = toolkit.position.rope.apply_rope
SOFTMAX = torch.nn.functional.softmax


@pytest.fixture
def bridge():
    namespace: dict = {"__name__": "__main__"}  # as in a kernel
    exec(STUDENT, namespace)
    return kernel_side.make_bridge(namespace)


def _call(bridge, tmp_path, name, forbid):
    x, pos = torch.randn(1, 2, 3, 4), torch.arange(3)
    save_file({"x": x, "pos": pos}, str(tmp_path / "inputs.safetensors"))
    request = {
        "kind": "call", "name": name, "forbid": list(forbid),
        "args": [{"type": "tensor", "key": "x"}, {"type": "tensor", "key": "pos"}],
        "tensors": str(tmp_path / "inputs.safetensors"),
        "reply": str(tmp_path / "reply.json"),
        "reply_tensors": str(tmp_path / "reply.safetensors"),
    }
    (tmp_path / "request.json").write_text(json.dumps(request))
    bridge.handle(str(tmp_path / "request.json"))
    return json.loads((tmp_path / "reply.json").read_text())


def _returned(tmp_path, reply):
    """The tensor the called function returned."""
    from safetensors.torch import load_file

    return load_file(str(tmp_path / "reply.safetensors"))[reply["result"]["key"]]


def _assert_restored(bridge):
    assert toolkit.position.apply_rope is APPLY_ROPE
    assert toolkit.position.rope.apply_rope is APPLY_ROPE
    assert toolkit.models.attention.apply_rope is APPLY_ROPE
    assert bridge.ns["rotate"] is APPLY_ROPE
    assert torch.nn.functional.softmax is SOFTMAX and bridge.ns["soft"] is SOFTMAX


@pytest.mark.parametrize("forbidden", ["toolkit.position.apply_rope",
                                       "toolkit.position.rope.apply_rope"])
@pytest.mark.parametrize("path", ["via_alias", "via_package", "via_defining_module",
                                  "via_other_module"])
def test_every_path_to_a_forbidden_function_trips(bridge, tmp_path, forbidden, path):
    reply = _call(bridge, tmp_path, path, [forbidden])
    assert reply["ok"] is False and reply["violations"] == [forbidden], reply
    assert reply["called_from"] == [path], reply  # the student's function that called it
    _assert_restored(bridge)
    message = str(protocol.forbidden_shortcut(reply))
    assert message == (f"your code called {forbidden} (in `{path}`), which this exercise asks "
                       "you to implement yourself")


def test_own_code_runs_and_everything_is_restored(bridge, tmp_path):
    reply = _call(bridge, tmp_path, "own", ["toolkit.position.apply_rope"])
    assert reply["ok"] is True and reply["violations"] == [], reply
    reply = _call(bridge, tmp_path, "via_alias", [])  # nothing forbidden: the toolkit runs
    assert reply["ok"] is True, reply
    _assert_restored(bridge)


def test_torch_names_by_identity_too(bridge, tmp_path):
    reply = _call(bridge, tmp_path, "via_torch_alias", ["torch.nn.functional.softmax"])
    assert reply["violations"] == ["torch.nn.functional.softmax"], reply
    _assert_restored(bridge)


def test_a_whole_package_bans_what_its_modules_define(bridge, tmp_path):
    reply = _call(bridge, tmp_path, "via_alias", ["toolkit.position"])
    assert reply["violations"] == ["toolkit.position"], reply
    _assert_restored(bridge)


def test_places_are_found_once_and_again_after_an_import(bridge, tmp_path):
    forbid = ["toolkit.position.apply_rope", "torch.nn.functional.softmax"]
    for _ in range(3):
        _call(bridge, tmp_path, "own", forbid)
    assert bridge.site_scans == 1
    # A module imported later (by a check, or by the student's code) can hold another alias.
    late = types.ModuleType("toolkit._late_alias_for_test")
    late.apply_rope = APPLY_ROPE
    sys.modules[late.__name__] = late
    try:
        bridge.ns["late"] = late
        exec("def via_late(x, pos):\n    return late.apply_rope(x, pos)", bridge.ns)
        reply = _call(bridge, tmp_path, "via_late", forbid)
        assert reply["violations"] == ["toolkit.position.apply_rope"], reply
        assert bridge.site_scans == 2 and late.apply_rope is APPLY_ROPE
    finally:
        del sys.modules[late.__name__]
    _assert_restored(bridge)


@pytest.mark.parametrize("code, expected", [
    ("from transformers.models.llama.modeling_llama import rotate_half\n"
     "def shortcut(x, pos):\n    return rotate_half(x)",
     "transformers.models.llama.modeling_llama.rotate_half"),
    ("from transformers.models.bloom import modeling_bloom\n"
     "def shortcut(x, pos):\n"
     "    return modeling_bloom.build_alibi_tensor(torch.ones(1, 3), 4, torch.float32)",
     "transformers.models.bloom.modeling_bloom.build_alibi_tensor"),
])
def test_hugging_face_helpers_of_02_trip(bridge, tmp_path, code, expected):
    """02's forbid list covers the Hugging Face functions that return an exercise's answer."""
    forbid = AssignmentSpec.load("02-positional").forbid
    exec(code, bridge.ns)
    reply = _call(bridge, tmp_path, "shortcut", forbid)
    assert reply["ok"] is False and reply["violations"] == [expected], reply
    _assert_restored(bridge)


@pytest.mark.parametrize("assignment, code, expected", [
    ("01-attention", "from toolkit.flash import causal_tile_mask\n"
     "def shortcut(x, pos):\n    return causal_tile_mask(0, 3, 0, 3, 0, x.device)",
     "toolkit.flash.causal_tile_mask"),
    ("01-attention", "from toolkit.transformer.blocks import EncoderBlock\n"
     "def shortcut(x, pos):\n    return EncoderBlock(4, 2, 8)(x[0])",
     "toolkit.transformer.EncoderBlock"),
    ("02-positional", "from toolkit.widgets.attention.permutation import _sinusoidal_positions\n"
     "def shortcut(x, pos):\n    return _sinusoidal_positions(3, 4)",
     "toolkit.widgets.attention.permutation._sinusoidal_positions"),
    ("03-efficient-attention", "import toolkit.masks\n"
     "def shortcut(x, pos):\n"
     "    return toolkit.masks.bigbird_mask(5, 1, window_blocks=3, global_blocks=0, "
     "random_blocks=0)",
     "toolkit.masks.bigbird_mask"),
    ("05-blocks", "from toolkit.models.fused import FusedRMSNorm\n"
     "def shortcut(x, pos):\n    return FusedRMSNorm(4)(x)",
     "toolkit.models.fused.FusedRMSNorm"),
    ("07-capstone", "from toolkit.flash import flash_attention\n"
     "def shortcut(x, pos):\n    return flash_attention(x, x, x, causal=True)",
     "toolkit.flash.flash_attention"),
])
def test_the_toolkits_other_routes_to_an_answer_trip(bridge, tmp_path, assignment, code,
                                                      expected):
    """Toolkit code that computes an exercise under another name is on its forbid list."""
    exec(code, bridge.ns)
    reply = _call(bridge, tmp_path, "shortcut", AssignmentSpec.load(assignment).forbid)
    assert reply["ok"] is False and reply["violations"] == [expected], reply
    _assert_restored(bridge)


def test_a_forbidden_backend_trips_through_the_models_table(bridge, tmp_path):
    """The capstone model picks its attention from a table of backend functions: a
    forbidden one trips when the model reaches it through that table."""
    exec("from toolkit.models.backends import causal_attention\n"
         "def shortcut(x, pos):\n    return causal_attention(x, x, x, 'reference')", bridge.ns)
    forbidden = "toolkit.models.backends.reference_attention"
    reply = _call(bridge, tmp_path, "shortcut", [forbidden])
    assert reply["ok"] is False and reply["violations"] == [forbidden], reply
    assert _call(bridge, tmp_path, "shortcut", [])["ok"] is True  # unguarded, it runs
    _assert_restored(bridge)


def test_a_forbidden_function_kept_in_a_toolkit_table_or_default_trips(bridge, tmp_path):
    """The toolkit keeps some functions in tables (what a widget draws with) and as keyword
    defaults: the guard replaces those entries too, and puts them back."""
    import toolkit.attention
    import toolkit.mlm
    import toolkit.pretrain
    from toolkit.widgets.attention import heatmap

    weights, mask_tokens = toolkit.attention.attention_weights, toolkit.mlm.mask_tokens
    exec("from toolkit.widgets.attention import heatmap\n"
         "def via_table(x, pos):\n"
         "    return heatmap.TOOLKIT_FUNCTIONS['attention_weights'](x, x)\n", bridge.ns)
    reply = _call(bridge, tmp_path, "via_table", ["toolkit.attention.attention_weights"])
    assert reply["violations"] == ["toolkit.attention.attention_weights"], reply
    assert heatmap.TOOLKIT_FUNCTIONS["attention_weights"] is weights
    # A keyword default: while the check runs it is the tripwire, then the original again.
    exec("import torch, toolkit.pretrain\n"
         "def default_seen(x, pos):\n"
         "    fn = toolkit.pretrain.evaluation_batch.__kwdefaults__['mask_fn']\n"
         "    return torch.tensor(float(hasattr(fn, '__wrapped_original__')))\n", bridge.ns)
    reply = _call(bridge, tmp_path, "default_seen", ["toolkit.mlm.mask_tokens"])
    assert reply["ok"] and _returned(tmp_path, reply).item() == 1.0, reply
    assert toolkit.pretrain.evaluation_batch.__kwdefaults__["mask_fn"] is mask_tokens
    _assert_restored(bridge)


def test_a_forbidden_function_in_a_positional_default_or_closure_trips(bridge, tmp_path,
                                                                       monkeypatch):
    """A positional default (``masking_example(sentence, mask_fn=mask_tokens)``) and a
    closure's cell (a function a factory made) are replaced too, and put back."""
    import toolkit.mlm
    from toolkit.widgets.blocks import masking

    mask_tokens = toolkit.mlm.mask_tokens
    made = types.ModuleType("toolkit._made_by_a_factory")  # the toolkit has none of these

    def factory(fn):
        def masked(*args, **kwargs):
            return fn(*args, **kwargs)
        return masked

    made.masked = factory(mask_tokens)
    monkeypatch.setitem(sys.modules, made.__name__, made)
    exec("import torch, toolkit._made_by_a_factory as made\n"
         "from toolkit.widgets.blocks import masking\n"
         "def default_seen(x, pos):\n"
         "    return torch.tensor(float(hasattr(masking.masking_example.__defaults__[0],\n"
         "                                      '__wrapped_original__')))\n"
         "def via_closure(x, pos):\n"
         "    return made.masked(x)\n", bridge.ns)
    reply = _call(bridge, tmp_path, "default_seen", ["toolkit.mlm.mask_tokens"])
    assert reply["ok"] and _returned(tmp_path, reply).item() == 1.0, reply  # the tripwire
    assert masking.masking_example.__defaults__[0] is mask_tokens
    reply = _call(bridge, tmp_path, "via_closure", ["toolkit.mlm.mask_tokens"])
    assert reply["violations"] == ["toolkit.mlm.mask_tokens"], reply
    assert made.masked.__closure__[0].cell_contents is mask_tokens
    _assert_restored(bridge)
