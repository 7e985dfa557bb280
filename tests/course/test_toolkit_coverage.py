"""Everything the toolkit knows reaches a student: every public function and class of
``toolkit/`` is used by a lecture or an assignment notebook, or is listed below with the
reason it is not.

A notebook *uses* a toolkit name when a code cell imports it from a toolkit module
(``from toolkit.position import apply_rope``), reaches it through an imported toolkit
module (``P.apply_rope`` after ``from toolkit import position as P``), or, in an
assignment, defines it: the student writes that function, and its solution must match
the toolkit's (``tests/assignments/test_solutions_match_toolkit.py``). Lectures are those
of ``course/course.toml``; assignment notebooks those named in each ``assignment.toml``.
Source is read, never run. A name in a comment or a string does not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import jupytext
from IPython.core.inputtransformer2 import TransformerManager

from autograder.workspace.course import ASSIGNMENTS_DIR, AssignmentSpec, available_assignments
from autograder.workspace.outline import COURSE_FILE, load_outline

ROOT = Path(__file__).resolve().parents[2]

#: Public names no notebook needs, and why. Keep each reason to one line.
NOT_FOR_NOTEBOOKS = {
    "held_out_windows": "the windows toolkit.long_context.measure reads; notebooks call measure",
    "model_variants": "the models and methods measure loops over; notebooks call measure",
    "train_position_model": "one training run of trained_models, which notebooks call",
    "train_recall_model": "one run of toolkit.hybrid's trained_models, which lecture 06 calls",
    "build_model": "the untrained models toolkit.hybrid's trained_models trains and loads",
    "HybridArguments": "the arguments save_hybrid records; 06 calls save_hybrid and load_hybrid",
    "mqar_step": "one step of train_on_mqar and train_recall_model, which notebooks call",
    "PositionedAttention": "a layer of PositionGPT; notebooks build models with position_model",
    "PositionBlock": "a layer of PositionGPT; notebooks build models with position_model",
    "RMSNormGain": "a layer of PositionGPT; notebooks build models with position_model",
    "SwiGLUFeedForward": "a layer of PositionGPT; notebooks build models with position_model",
    "PositionGPT": "what position_model returns; notebooks call position_model",
    "use_position_functions": "how trained_models and measure take a student's apply_rope (fns=)",
    "PositionModelConfig": "a PositionGPT's sizes; notebooks call position_model",
    "check_step_sizes": "an argument check of toolkit.ssm; no notebook calls it",
    "selective_scan_parallel": "the hidden checks' reference scan; 06 has students write theirs",
    "main": "the command line `python -m toolkit.train`; lecture 07 trains through train()",
    "Unwritten": "friendly_errors' reading of a stub's message; notebooks call friendly_errors()",
    "unwritten_exercise": "friendly_errors' and the widgets' reading of a stub's message",
    "is_headless": "widget plumbing: every builder asks it whether to draw",
    "headless_placeholder": "widget plumbing: what a builder returns while grading",
    "live_figure": "widget plumbing: the redraw loop every builder is built on",
    "widget_functions": "widget plumbing: how a builder picks the student's functions (fns)",
    "WidgetFunctions": "widget plumbing: what widget_functions returns",
    "unwritten_message": "widget plumbing: the line a widget shows for an unwritten exercise",
    "unwritten_html": "widget plumbing: that line as HTML",
    "refused_html": "widget plumbing: the line live_figure shows for settings a function refuses",
    "reports_unwritten": "widget plumbing: the same for builders that compute first",
    "unless_unwritten": "widget plumbing: one panel or row that waits for a later exercise",
    "tied_parameter_names": "save_bert's helper: the tied decoder is stored once",
    "truncate_pair": "pair_inputs' truncation (longest segment first, as Hugging Face's)",
    "MLMCorpus": "what load_mlm_corpus returns; notebooks use its fields",
    "contiguous_pairs": "load_mlm_corpus' helper: consecutive segments as [CLS] A [SEP] B [SEP]",
    "evaluate": "pretrain's validation helper; 05 measures with its own TinyBert's head",
    "mlm_loss": "the loss pretrain and prepare minimise; 05 calls pretrain",
    "DeepStack": "the toy model warmup_experiment trains; 05 calls warmup_experiment",
    "layer_scales": "what layer_scale_explorer measures; 05 and its lecture show the explorer",
    "sorting_batch": "the toy task of warmup_experiment; 05 calls warmup_experiment",
    "train_deep_stack": "one run of warmup_experiment; 05 calls warmup_experiment",
    "finetune": "the loop finetuning_curve runs (and 05's prepare script); 05 calls the curve",
    "cls_attention": "what attention_examples computes for each example the widget shows",
    "attention_examples": "what finetuning_results gathers for finetuning_explorer",
    "module_words": "module_task's reading of one corpus module",
}

#: A widget's helper (a pure plot, the data behind it) that notebooks see through its
#: builder: ``helper -> builder``. Both live in one module, and the builder must be used.
SHOWN_BY_BUILDER = {
    "plot_finetuning": "finetuning_explorer",
    "plot_rope_spectrum": "rope_spectrum_explorer",
    "plot_score_vs_distance": "score_vs_distance_explorer",
    "plot_alibi_heads": "alibi_explorer",
    "plot_train_short_test_long": "train_short_test_long_explorer",
    "plot_router_load": "router_load_explorer",
    "simulate_router": "router_load_explorer",
    "plot_ssm_kernel": "ssm_kernel_explorer",
    "ssm_impulse_response": "ssm_kernel_explorer",
    "memory_horizon": "ssm_kernel_explorer",
    "selective_forgetting": "ssm_kernel_explorer",
    "plot_rwkv_decay": "rwkv_decay_explorer",
    "channel_decays": "rwkv_decay_explorer",
    "wkv_trace": "rwkv_decay_explorer",
    "plot_mamba_selectivity": "mamba_selectivity_explorer",
    "selective_states": "mamba_selectivity_explorer",
    "selectivity_inputs": "mamba_selectivity_explorer",
    "plot_gau": "gau_explorer",
    "gau_internals": "gau_explorer",
    "plot_decoding_costs": "decoding_cost_explorer",
    "plot_layer_scales": "layer_scale_explorer",
    "plot_layer_scales_at_init": "layer_scale_explorer",
    "gate_example": "glu_gate_explorer",
    "plot_glu_gates": "glu_gate_explorer",
    "course_vocab": "mlm_masking_playground",
    "masking_example": "mlm_masking_playground",
    "masking_outcomes": "mlm_masking_playground",
    "outcome_shares": "mlm_masking_playground",
    "message_figure": "mlm_masking_playground",
    "plot_mlm_masking": "mlm_masking_playground",
    "plot_soft_targets": "temperature_explorer",
    "linear_vs_softmax": "linear_attention_explorer",
    "running_state": "linear_attention_explorer",
    "plot_linear_attention": "linear_attention_explorer",
    "latent_tradeoff": "mla_explorer",
    "plot_latent_tradeoff": "mla_explorer",
    "distractor_example": "differential_explorer",
    "differential_maps": "differential_explorer",
    "plot_differential_maps": "differential_explorer",
    "cross_attention_maps": "cross_attention_explorer",
    "plot_cross_attention": "cross_attention_explorer",
    "beam_steps": "beam_explorer",
    "plot_beams": "beam_explorer",
}

#: What the toolkit implements and no notebook shows yet, by the assignment whose topic it
#: is: the lecture or assignment of that number should show it (then delete the line).
NOT_YET_SHOWN = {
    # The capstone's fast paths (FastGPT's layers, GPTConfig.attention_backend = "sdpa" |
    # "blocked" | "triton"); the notebooks keep the teaching path (lecture 07 trains a
    # FastGPT), benchmarks/capstone.py and tests exercise these.
    "check_flash_backward_inputs": "04/07: the Triton backward's input check",
    "TritonFlashAttention": "07: the course's kernels as one autograd Function",
    "triton_attention": "07: the course's kernels as one autograd Function",
    "flash_attention_backward_tuned": "04: the tuned backward beside the student's kernel",
    "causal_attention": "07: the backend switch of the capstone model",
    "reference_attention": "07: the backend switch of the capstone model",
    "resolve_backend": "07: the backend switch of the capstone model",
    "sdpa_attention": "07: the backend switch of the capstone model",
    "triton_causal_attention": "07: the backend switch of the capstone model",
    "causal_block_mask": "07: the blocked backend's mask of one query block",
    "FastCausalSelfAttention": "07: the capstone model's fast attention layer",
    "fast_twin": "07: how FastGPT swaps each teaching layer for its fused twin",
    "pairs_side_by_side": "07: RoPE on the fast path (a layout helper)",
    "rope_phasors": "07: RoPE on the fast path (precomputed rotations)",
    "rope_table": "07: RoPE on the fast path (precomputed rotations)",
    "rotate_pairs": "07: RoPE on the fast path",
    "FusedFeedForward": "07: fused feed-forward on the fast path",
    "FusedLayerNorm": "07: fused LayerNorm on the fast path",
    "FusedRMSNorm": "07: fused RMSNorm on the fast path",
    "FusedSwiGLU": "07: SwiGLU's gate with fewer new tensors on the fast path",
}


def public_toolkit_names() -> dict[str, str]:
    """``name -> module`` of every public top-level function and class of ``toolkit/``."""
    found = {}
    for path in sorted((ROOT / "toolkit").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if any(p.startswith("_") for p in parts if p not in ("__init__", "__main__")):
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                found[node.name] = ".".join(p for p in parts if p != "__init__")
    return found


def notebooks() -> dict[str, tuple[Path, bool]]:
    """``label -> (source, is_assignment)`` for every lecture and assignment notebook."""
    outline = load_outline(COURSE_FILE)
    found = {f"lecture {lec.stem}": (outline.lecture_source(lec), False)
             for lec in outline.lectures}
    for name in available_assignments(ASSIGNMENTS_DIR):
        spec = AssignmentSpec.load(name, ASSIGNMENTS_DIR)
        for nb in spec.notebooks:
            found[f"assignment {name}/{nb}"] = (spec.path / f"{nb}.py", True)
    return found


def used_names(source: Path, defines_count: bool) -> set[str]:
    """Toolkit names a notebook imports, reaches through a toolkit module, or defines."""
    if source.suffix == ".py":
        nb = jupytext.read(source, fmt="py:percent")
    else:
        nb = jupytext.read(source)
    code = "\n".join(TransformerManager().transform_cell(c.source)
                     for c in nb.cells if c.cell_type == "code")
    tree = ast.parse(code)
    modules, used = set(), set()  # local names bound to toolkit modules
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "toolkit":
                    modules.add(alias.asname or "toolkit")
                    used.update(alias.name.split(".")[1:] if alias.asname else [])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "toolkit":
            for alias in node.names:
                used.add(alias.name)
                modules.add(alias.asname or alias.name)  # harmless if it is not a module
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain, inner = [node.attr], node.value
            while isinstance(inner, ast.Attribute):
                chain.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id in modules:
                used.update(chain)
        elif defines_count and isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            used.add(node.name)
    return used


def test_the_check_reads_imports_module_attributes_and_definitions(tmp_path):
    source = tmp_path / "nb.py"
    source.write_text(
        "# %%\n# %matplotlib inline\nfrom toolkit.masks import causal_mask as cm\n"
        "from toolkit import position as P\nimport toolkit.flash\nx = P.apply_rope\n"
        "y = toolkit.flash.online_softmax\n"
        "# %% [markdown]\n# alibi_bias in a comment\n# %%\ndef generate():\n    pass\n"
        "s = 'rope_cos_sin'\n")
    names = used_names(source, defines_count=True)
    assert {"causal_mask", "apply_rope", "online_softmax", "generate"} <= names
    assert not {"alibi_bias", "rope_cos_sin", "cm"} & names
    assert "generate" not in used_names(source, defines_count=False)


def test_every_public_toolkit_name_is_used_or_excused():
    public = public_toolkit_names()
    used = set()
    for source, is_assignment in notebooks().values():
        used |= used_names(source, defines_count=is_assignment)
    excused = set(NOT_FOR_NOTEBOOKS) | set(SHOWN_BY_BUILDER) | set(NOT_YET_SHOWN)
    unused = sorted(f"{public[n]}.{n}" for n in set(public) - used - excused)
    assert not unused, (
        "public toolkit names that no lecture or assignment uses (show each in the lecture "
        "of its topic, or list it in this test with a one-line reason):\n  " + "\n  ".join(unused))
    unused_builders = sorted(b for b in SHOWN_BY_BUILDER.values() if b not in used)
    assert not unused_builders, (
        f"builders listed in SHOWN_BY_BUILDER that no notebook shows: {unused_builders}")


def test_the_exceptions_are_real_and_still_needed():
    public = public_toolkit_names()
    listed = [*NOT_FOR_NOTEBOOKS, *SHOWN_BY_BUILDER, *SHOWN_BY_BUILDER.values(), *NOT_YET_SHOWN]
    assert not [n for n in listed if n not in public], "exceptions name no public toolkit name"
    elsewhere = {h: b for h, b in SHOWN_BY_BUILDER.items() if public[h] != public[b]}
    assert not elsewhere, f"a helper and its builder live in different modules: {elsewhere}"
    used = set()
    for source, is_assignment in notebooks().values():
        used |= used_names(source, defines_count=is_assignment)
    stale = sorted(n for n in [*NOT_FOR_NOTEBOOKS, *SHOWN_BY_BUILDER] if n in used)
    assert not stale, f"now used by a notebook, so remove them from the exceptions: {stale}"
    reasons = [*NOT_FOR_NOTEBOOKS.values(), *NOT_YET_SHOWN.values()]
    assert all(reason and "\n" not in reason and len(reason) <= 90 for reason in reasons)


#: Every attention component of units 01-04 with its four faces: ``component -> (toolkit
#: module, the name the student writes, assignment, lecture, widget builder)``. The
#: student's name is the toolkit's reference (a solution cell of the assignment defines
#: it); the lecture of that unit uses it; the widget is shown by the lecture or the
#: assignment.
ATTENTION_COMPONENTS = {
    "scaled dot-product attention": ("toolkit.attention", "attention_weights", "01-attention",
                                     "01-attention", "attention_explorer"),
    "causal and padding masks": ("toolkit.masks.basic", "causal_mask", "01-attention",
                                 "01-attention", "attention_explorer"),
    "multi-head attention": ("toolkit.attention", "MultiHeadAttention", "01-attention",
                             "01-attention", "families_explorer"),
    "RoPE": ("toolkit.position.rope", "apply_rope", "02-positional", "02-positional",
             "rope_rotation_explorer"),
    "ALiBi": ("toolkit.position.biases", "alibi_bias", "02-positional", "02-positional",
              "alibi_explorer"),
    "context extension (PI, NTK, YaRN)": ("toolkit.position.rope_scaling",
                                          "yarn_inv_freq_and_temperature",
                                          "02-positional", "02-positional",
                                          "long_context_explorer"),
    "sparse windows": ("toolkit.masks.sparse", "sliding_window_mask", "03-efficient-attention",
                       "03-efficient-attention", "mask_gallery"),
    "global tokens": ("toolkit.masks.sparse", "global_token_mask", "03-efficient-attention",
                      "03-efficient-attention", "mask_gallery"),
    "linear attention": ("toolkit.linear_attention", "linear_attention",
                         "03-efficient-attention", "03-efficient-attention",
                         "linear_attention_explorer"),
    "GQA, MQA and the KV cache": ("toolkit.gqa", "repeat_kv", "03-efficient-attention",
                                  "03-efficient-attention", "kv_cache_calculator"),
    "multi-head latent attention": ("toolkit.mla", "mla_cache_bytes", "03-efficient-attention",
                                    "03-efficient-attention", "mla_explorer"),
    "differential attention": ("toolkit.differential", "DifferentialAttention",
                               "03-efficient-attention", "03-efficient-attention",
                               "differential_explorer"),
    "FlashAttention": ("toolkit.flash.tiled", "flash_attention_forward", "04-flash-attention",
                       "04-flash-attention", "online_softmax_stepper"),
}


def _module_defines(module: str, name: str) -> bool:
    path = ROOT / Path(*module.split("."))
    source = path.with_suffix(".py") if path.with_suffix(".py").exists() else path / "__init__.py"
    return any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name
               for n in ast.parse(source.read_text()).body)


def _solution_names(notebook: Path) -> set[str]:
    nb = jupytext.read(notebook, fmt="py:percent")
    names = set()
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
            names |= {n.name for n in ast.parse(cell.source).body
                      if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return names


def test_every_attention_component_has_its_four_faces():
    """Module, graded exercise, lecture and widget for each component of units 01-04."""
    outline = load_outline(COURSE_FILE)
    lectures = {lec.stem: outline.lecture_source(lec) for lec in outline.lectures}
    widgets = public_toolkit_names()
    missing = []
    for component, (module, name, assignment, lecture, widget) in ATTENTION_COMPONENTS.items():
        spec = AssignmentSpec.load(assignment, ASSIGNMENTS_DIR)
        notebooks = [spec.path / f"{nb}.py" for nb in spec.notebooks]
        if not _module_defines(module, name):
            missing.append(f"{component}: {module} does not define {name}")
        if not any(name in _solution_names(nb) for nb in notebooks):
            missing.append(f"{component}: no solution cell of {assignment} defines {name}")
        lecture_uses = used_names(lectures[lecture], defines_count=False)
        if name not in lecture_uses:
            missing.append(f"{component}: lecture {lecture} does not use {name}")
        if not widgets.get(widget, "").startswith("toolkit.widgets."):
            missing.append(f"{component}: {widget} is no widget builder of toolkit.widgets")
        shown = lecture_uses.union(*(used_names(nb, defines_count=False) for nb in notebooks))
        if widget not in shown:
            missing.append(
                f"{component}: neither lecture {lecture} nor {assignment} shows {widget}")
    assert not missing, "\n".join(missing)
