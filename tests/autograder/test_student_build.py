"""The student toolkit, installed in a fresh virtual environment: graded functions are stubs
that name their assignment, and every widget still builds (and says what it needs)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

from autograder.student.toolkit_wheel import (
    build_student_toolkit,
    graded_names,
    stage_student_toolkit,
    student_requirements,
    wheel_version,
)
from autograder.workspace.course import AssignmentSpec

pytestmark = pytest.mark.slow

ASSIGNMENTS = Path(__file__).resolve().parents[2] / "assignments"

# Runs inside the fresh venv: what the student's toolkit does with a graded function and
# with each widget builder (TOOLKIT_HEADLESS unset, so every builder really draws).
PROBE = textwrap.dedent("""
    import os
    os.environ["TRITON_INTERPRET"] = "1"  # before Triton loads: launch kernels on the CPU
    import json, types
    import matplotlib
    matplotlib.use("Agg")
    import ipywidgets as w
    import torch
    import toolkit
    import toolkit.widgets
    from toolkit.attention import scaled_dot_product_attention
    from toolkit.data import ByteTokenizer

    try:
        q = torch.ones(1, 2, 4)
        scaled_dot_product_attention(q, q, q)
        stub = None
    except NotImplementedError as error:
        stub = str(error)

    def walk(widget):
        yield widget
        for child in getattr(widget, "children", ()):
            yield from walk(child)

    # GPT is itself a stub here; the comparison stops at `generate`, before any model runs.
    model = torch.nn.Module()
    model.config = types.SimpleNamespace(max_seq_len=16)
    # EncoderDecoder is a stub too; the widgets stop at the decoder, before any model runs.
    from toolkit.seq2seq import NumberTokenizer
    encdec = torch.nn.Module()
    encdec.config = types.SimpleNamespace(n_heads=2, pad_id=0, eos_id=1)
    encdec.decoder_layers = torch.nn.ModuleList([torch.nn.Module()])
    seq2seq = {"model": encdec, "tokenizer": NumberTokenizer()}
    arguments = {
        "sampling_playground": {"logits": torch.linspace(2.0, -2.0, 12)},
        "side_by_side_generation": {"models": {"a": model}, "tokenizer": ByteTokenizer()},
        "cross_attention_explorer": seq2seq,
        "beam_explorer": seq2seq,
    }
    shown = {}
    for package, names in toolkit.widgets.BUILDERS.items():
        module = __import__(f"toolkit.widgets.{package}", fromlist=["_"])
        for name in names:
            widget = getattr(module, name)(**arguments.get(name, {}))
            parts = list(walk(widget))
            shown[name] = {
                "drawn": any(isinstance(p, w.Image) and p.value and p.layout.display != "none"
                             for p in parts),
                "says": [p.value for p in parts if isinstance(p, w.HTML)
                         and "is not written yet" in p.value],
            }
    # Assignment 05's evaluation with the notebook's own masking, not the stubbed default.
    from toolkit.pretrain import evaluation_batch, load_mlm_corpus
    corpus = load_mlm_corpus()
    try:
        evaluation_batch(corpus, n=2)
        default_masking = "ran"
    except NotImplementedError as error:
        default_masking = str(error)
    own = evaluation_batch(corpus, n=2, mask_fn=lambda ids, s, m, v, generator=None: (
        torch.full_like(ids, m), ids))
    own_masking = bool(torch.equal(own["labels"], corpus.val_ids[:2]))
    # Code that computes a locked answer under another name is withheld, kernels included.
    from toolkit.notebook import unwritten_exercise
    from toolkit.kernels import flash_attention_tuned
    from toolkit.kernels.flash_backward_kernels import bwd_preprocess_kernel
    from toolkit.models.fused import _RMSNormFunction
    from toolkit.transformer import EncoderBlock
    x = torch.randn(1, 2, 16, 16)
    lse = x[..., 0].contiguous()
    withheld = {}
    for name, call in {
        "flash_attention_tuned": lambda: flash_attention_tuned(x, x, x),
        "bwd_preprocess_kernel": lambda: bwd_preprocess_kernel[(1, 2)](
            x, x, lse, lse, lse, *x.stride(), *x.stride(), *lse.stride(), 2, 16, 16,
            BLOCK_M=16, BLOCK_D=16),
        "_RMSNormFunction": lambda: _RMSNormFunction.apply(x, torch.ones(16), 1e-6),
        "EncoderBlock": lambda: EncoderBlock(16, 2, 32),
    }.items():
        try:
            call()
            withheld[name] = "ran"
        except Exception as error:
            found = unwritten_exercise(error)
            withheld[name] = found.reason if found else f"{type(error).__name__}: {error}"
    print(json.dumps({"toolkit": toolkit.__file__, "stub": stub, "shown": shown,
                      "default_masking": default_masking, "own_masking": own_masking,
                      "withheld": withheld}))
""")


@pytest.fixture(scope="module")
def student_venv(tmp_path_factory):
    """A venv without pip whose only own package is the student wheel; torch, ipywidgets
    and the rest come from the project's venv through a .pth line (a path line loads no
    editable-install finder, so ``toolkit`` can only be the wheel's)."""
    root = tmp_path_factory.mktemp("student")
    wheel = build_student_toolkit(root / "wheel", ASSIGNMENTS)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "project-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                    "--no-deps", "--no-index", str(wheel)], check=True)
    return wheel, python, Path(site)


def test_the_wheel_holds_the_toolkit_only(student_venv):
    wheel, _, _ = student_venv
    top = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert "toolkit" in top and not top & {"autograder", "assignments", "tests"}


def test_the_wheel_requires_every_library_the_toolkit_imports(student_venv):
    """A student installs the wheel into an empty environment: each library that a module
    of the wheel imports must come with it (``tqdm`` for the training loop, and Triton on
    Linux, which a CPU-only PyTorch does not bring), at the version the grader runs."""
    from importlib.metadata import packages_distributions

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    wheel, _, _ = student_venv
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(archive.read(name).decode() for name in archive.namelist()
                        if name.endswith(".dist-info/METADATA"))
        imported = set()
        for name in archive.namelist():
            if name.endswith(".py"):
                for node in ast.walk(ast.parse(archive.read(name))):
                    if isinstance(node, ast.Import):
                        imported |= {alias.name.split(".")[0] for alias in node.names}
                    elif isinstance(node, ast.ImportFrom) and node.level == 0:
                        imported.add(node.module.split(".")[0])
    required = {canonicalize_name(Requirement(line.split(":", 1)[1]).name): line
                for line in metadata.splitlines() if line.startswith("Requires-Dist:")}
    libraries = imported - set(sys.stdlib_module_names) - {"toolkit"}
    assert {"torch", "tqdm", "triton"} <= libraries  # the scan sees the toolkit's imports
    owners = packages_distributions()
    missing = {name for name in libraries
               if not {canonicalize_name(d) for d in owners.get(name, [name])} & set(required)}
    assert not missing, f"the wheel does not require {sorted(missing)}: {sorted(required)}"
    assert 'platform_system == "Linux"' in required["triton"]
    assert "torch==" in required["torch"]  # the version the grader runs


def test_a_changed_toolkit_gets_a_new_version(tmp_path):
    """pip keeps an installed wheel of the same version: a mid-term fix to the toolkit, or
    an assignment unlocked, must reach students who install the new build."""
    requirements = student_requirements()
    stage_student_toolkit(tmp_path / "a", ASSIGNMENTS)
    stage_student_toolkit(tmp_path / "b", ASSIGNMENTS)
    stage_student_toolkit(tmp_path / "unlocked", ASSIGNMENTS, ["01-attention"])
    same = wheel_version(tmp_path / "a", requirements)
    assert same == wheel_version(tmp_path / "b", requirements)  # reproducible
    assert wheel_version(tmp_path / "unlocked", requirements) != same
    with (tmp_path / "b" / "data.py").open("a") as f:
        f.write("# a fix\n")
    assert wheel_version(tmp_path / "b", requirements) != same
    assert wheel_version(tmp_path / "a", [*requirements, "extra>=1"]) != same


def test_graded_functions_are_stubs_and_every_widget_builds(student_venv, tmp_path):
    _, python, site = student_venv
    env = {k: v for k, v in os.environ.items() if k not in ("TOOLKIT_HEADLESS", "PYTHONPATH")}
    done = subprocess.run([python, "-c", PROBE], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])

    assert Path(result["toolkit"]).is_relative_to(site)  # the wheel's, not the checkout's
    assert result["stub"].startswith(
        "`scaled_dot_product_attention` is not written yet (assignment 01-attention)")

    stubbed = set().union(*(graded_names(AssignmentSpec.load(name, ASSIGNMENTS))
                            for name in ("01-attention", "02-positional",
                                         "03-efficient-attention", "05-blocks",
                                         "06-beyond-attention", "07-capstone",
                                         "08-encoder-decoder")))
    for name, shown in result["shown"].items():
        if shown["drawn"]:
            assert not shown["says"], name
            continue
        # No figure: one line naming a function the wheel leaves out, and its assignment.
        (says,) = shown["says"]
        missing = says.split("needs <code>")[1].split("</code>")[0]
        assert missing in stubbed and "(assignment 0" in says, (name, says)
    assert result["default_masking"].startswith("`mask_tokens` is not written yet")
    assert result["own_masking"]  # a notebook's own mask_tokens runs in its place
    assert result["withheld"] == {
        name: f"`{name}` is withheld (assignment {assignment})"
        for name, assignment in [("flash_attention_tuned", "04-flash-attention"),
                                 ("bwd_preprocess_kernel", "04-flash-attention"),
                                 ("_RMSNormFunction", "05-blocks"),
                                 ("EncoderBlock", "01-attention")]
    }, result["withheld"]
    drawn = {name for name, shown in result["shown"].items() if shown["drawn"]}
    assert drawn == {"online_softmax_stepper", "attention_memory_explorer"}  # no exercise
