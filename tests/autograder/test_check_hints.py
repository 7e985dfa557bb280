"""What a student reads for a mistake that is not exactly a named one.

A diagnosis names a classic mistake when the student's answers equal a named mutant's on
every request. When the student's code differs a little more (the same off-by-one plus a
harmless change), no diagnosis matches and the failing check's own message is all the
student reads, so the checks recognise the commonest symptoms themselves. A diagnosis must
never name a mistake the student did not make (one that a passed exercise or another
check rules out), and an exercise that fails because an earlier one it calls is broken
says so first.

Here the real hidden checks run in this process against a student namespace built from
the instructor's notebook with a mistake written in, through the real request files, the
kernel side of the protocol (the code the grading kernel runs), the grader's pytest run,
the mistake oracle and the scoring that writes the feedback.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from autograder.grading.diagnosis import annotate, diagnose
from autograder.grading.oracle import MistakeOracle, graded_cells
from autograder.grading.runner import run_checks
from autograder.grading.scoring import cell_report_markdown, score_cells
from autograder.grading.upstream import exercise_uses
from autograder.labext.service_side.visibility import student_view
from autograder.protocol import kernel_side
from autograder.protocol.checklib import CheckFailure
from autograder.protocol.trusted import Submission
from autograder.workspace.assignment_spec import AssignmentSpec, apply_mutant
from autograder.workspace.course import notebook_from_text

# The cells the exercise needs besides its own: the imports, the blog's module and the
# LayerNorm of exercise 1 (its solution).
SETUP_CELLS = ("setup", "layer_norm", "blog_embeddings")
# The checks' markers are registered by the grader's pytest run, not this one.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnknownMarkWarning")


class InProcessKernel:
    """The part of a kernel session a :class:`Submission` talks to, run in this process:
    each request is handled by the bridge the grading kernel installs."""

    def __init__(self, namespace):
        self.bridge = kernel_side.make_bridge(namespace)

    def hand_over(self, path) -> None:
        pass  # the bridge runs in this process, which owns the exchange files already

    def ensure_alive(self, nb) -> bool:
        return True

    def request(self, path: str, timeout: float) -> dict:
        self.bridge.handle(path)
        return {"status": "ok"}


def _student(spec: AssignmentSpec, notebook: str, cell: str, mutant: str | None):
    """A namespace holding the notebook's setup and ``cell`` (the solution, or the solution
    with ``mutant`` applied)."""
    text = (apply_mutant(spec, next(m for m in spec.mutants if m.name == mutant))
            if mutant else spec.source_text(notebook))
    namespace: dict = {"__name__": "__main__"}
    for c in notebook_from_text(text).cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") in (*SETUP_CELLS, cell):
            exec(compile(c.source, f"<{c.metadata['nbgrader']['grade_id']}>", "exec"), namespace)
    return namespace


def _checks(spec: AssignmentSpec, module: str):
    path = spec.checks_dir() / f"{module}.py"
    loaded = importlib.util.spec_from_file_location(f"hidden_{path.stem}", path)
    checks = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(checks)
    return checks


@pytest.fixture(scope="module")
def blocks():
    return AssignmentSpec.load("05-blocks")


def _submission(spec, tmp_path, mutant):
    namespace = _student(spec, "blocks", "bert_embeddings", mutant)
    return Submission(InProcessKernel(namespace), nb=None, exchange_dir=tmp_path)


def test_positions_counted_from_one_get_their_own_hint(blocks, tmp_path):
    checks = _checks(blocks, "test_bert_embeddings")
    student = _submission(blocks, tmp_path, "positions-from-one")
    # Shorter than the table: the answer is token t reading row t + 1.
    for check in (checks.test_positions_matter, checks.test_default_segment_is_a):
        with pytest.raises(CheckFailure, match="start at 1. The first token is position 0"):
            check(student)  # not the segment hint the second check gives otherwise
    # As long as the table: the last id runs past its end, an IndexError in torch.
    with pytest.raises(CheckFailure, match=r"index error .* must be 0, 1, \.\.\., T-1"):
        checks.test_matches_reference(student)


def test_the_hints_stay_quiet_for_right_and_for_other_wrong_answers(blocks, tmp_path):
    checks = _checks(blocks, "test_bert_embeddings")
    right = _submission(blocks, tmp_path / "right", None)
    checks.test_positions_matter(right)
    checks.test_default_segment_is_a(right)
    checks.test_matches_reference(right)
    no_segments = _submission(blocks, tmp_path / "segments", "segments-ignored")
    with pytest.raises(CheckFailure) as failure:
        checks.test_matches_reference(no_segments)
    assert "token_type_ids change nothing" in str(failure.value)
    assert "position" not in str(failure.value)


# -- a whole notebook, graded in this process ---------------------------------------------
@pytest.fixture(scope="module")
def oracle():
    oracle = MistakeOracle()
    yield oracle
    oracle.close()


def _whole_notebook(spec: AssignmentSpec, notebook: str, edits=(), mutant=None):
    """``(namespace, source)``: the graded cells of the solution, with ``edits`` (text
    replacements) or ``mutant`` applied, run as the grading kernel runs them."""
    text = (apply_mutant(spec, next(m for m in spec.mutants if m.name == mutant))
            if mutant else spec.source_text(notebook))
    for find, replace in edits:
        assert text.count(find) == 1, find
        text = text.replace(find, replace)
    namespace: dict = {"__name__": "__main__"}
    for i, code in enumerate(graded_cells(text)):
        exec(compile(code, f"<cell {i}>", "exec"), namespace)
    return namespace, text


def _graded(spec: AssignmentSpec, notebook: str, tmp_path, oracle, *, edits=(),
            mutant=None) -> dict:
    """Score table of the solution with ``edits`` (text replacements) or ``mutant`` applied,
    as grading writes it: every hidden check, the diagnosis and who-calls-whom."""
    namespace, text = _whole_notebook(spec, notebook, edits, mutant)
    submission = Submission(InProcessKernel(namespace), nb=None, exchange_dir=tmp_path)
    records, transcripts = run_checks(spec.checks_dir(), submission)
    found = diagnose(spec, notebook, records, transcripts, oracle)
    annotate(records, found)
    nb = notebook_from_text(text)
    points = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
              for c in nb.cells if c.cell_type == "code"
              and c.metadata.get("nbgrader", {}).get("grade")}
    return score_cells(points, records, [d.as_dict() for d in found], uses=exercise_uses(nb))


def _named(table: dict) -> dict[str, set[str]]:
    return {cell: {d["mutant"] for d in entry["diagnoses"]} for cell, entry in table.items()
            if entry["diagnoses"]}


INVERTED_IN_ATTENTION = [('scores = scores.masked_fill(~mask, float("-inf"))',
                          'scores = scores.masked_fill(mask, float("-inf"))')]


def test_a_passed_exercise_rules_its_mistake_out_and_the_broken_callee_is_named(
        tmp_path, oracle):
    """The mask inverted inside attention_weights fails the decoder block's checks as an
    inverted causal_mask would; causal_mask passed all its checks, so it is not blamed,
    and the block's feedback starts with the exercise it calls that fails."""
    spec = AssignmentSpec.load("01-attention")
    table = _graded(spec, "attention", tmp_path / "student", oracle,
                    edits=INVERTED_IN_ATTENTION)
    assert table["test_masks"]["score"] == table["test_masks"]["max_score"]
    assert not any("inverted-causal" in names for names in _named(table).values())
    for cell in ("test_multi_head_attention", "test_decoder_block"):
        callees = [c["grade_cell"] for c in table[cell]["upstream"]]
        assert "test_attention_weights" in callees and "test_masks" not in callees
        report = cell_report_markdown(cell, table[cell]).splitlines()
        assert report[2].startswith("- **Fix first:** This exercise calls `attention_weights`")
    assert not table["test_attention_weights"]["upstream"]  # it calls nothing graded
    # The mistake itself is still named where the student made it.
    planted = _graded(spec, "attention", tmp_path / "mutant", oracle, mutant="inverted-causal")
    assert "inverted-causal" in _named(planted).get("test_decoder_block", set())
    assert not planted["test_decoder_block"]["upstream"]  # the diagnosis points there already


def test_a_check_the_mistake_would_answer_otherwise_rules_it_out(tmp_path, oracle):
    """kv_cache_bytes without bytes_per_element halves every fp16 answer, as a missing K+V
    factor 2 does; the fp32 and fp8 cases tell them apart, in the diagnosis and the hints."""
    spec = AssignmentSpec.load("03-efficient-attention")
    line = "total = 2 * n_layers * n_kv_heads * d_head * n_tokens * batch * bytes_per_element"
    table = _graded(spec, "efficient", tmp_path / "student", oracle,
                    edits=[(line, line.replace(" * bytes_per_element", ""))])
    entry = table["test_kv_cache_bytes"]
    assert entry["score"] == 0 and not entry["diagnoses"]
    messages = [c.message for c in entry["checks"] if not c.passed]
    assert any("multiply by bytes_per_element=4" in m for m in messages), messages
    assert not any("count both (the factor 2)" in m for m in messages), messages
    planted = _graded(spec, "efficient", tmp_path / "mutant", oracle,
                      mutant="kv-bytes-no-factor-2")
    assert _named(planted) == {"test_kv_cache_bytes": {"kv-bytes-no-factor-2"}}


def test_a_pitfall_every_named_mistake_of_which_answered_otherwise_is_not_shown(
        tmp_path, oracle):
    """A zero-order hold off by a factor 2 is no named mistake. The exercise's checks point
    to the Euler B_bar (delta * B), which the oracle tried and which answered otherwise:
    the student reads no "common mistake" they did not make."""
    spec = AssignmentSpec.load("06-beyond-attention")
    line = "    B_bar = torch.expm1(dA) / A * B  # (delta A)^{-1} (exp(delta A) - 1) delta B"
    table = _graded(spec, "beyond", tmp_path / "student", oracle,
                    edits=[(line, line.replace("torch.expm1", "2 * torch.expm1"))])
    entry = table["test_discretize_zoh"]
    failing = [c for c in entry["checks"] if not c.passed]
    assert entry["score"] == 0 and not entry["diagnoses"] and failing
    pointed = [c for c in failing if c.pitfall]
    assert pointed and all(c.pitfall_ruled_out for c in pointed), failing
    trusted = {"cells": {"test_discretize_zoh": {**entry, "checks": [c.as_dict() for c in
                                                                      entry["checks"]]}}}
    shown = student_view(trusted, "full")["exercises"][0]["checks"]
    assert [c["pitfall"] for c in shown] == [None] * len(shown)
    # The Euler mistake itself keeps its name (a diagnosis here, a pitfall without one).
    planted = _graded(spec, "beyond", tmp_path / "mutant", oracle, mutant="zoh-euler-b")
    assert _named(planted) == {"test_discretize_zoh": {"zoh-euler-b"}}
    assert not any(c.pitfall_ruled_out for c in planted["test_discretize_zoh"]["checks"])


def test_a_numpy_answer_is_refused_where_it_is_returned(tmp_path, oracle):
    """Converting a numpy result would pass its own exercise and break the next one, which
    then blames a correct merge_heads: the answer is refused with what to return."""
    spec = AssignmentSpec.load("01-attention")
    table = _graded(spec, "attention", tmp_path, oracle, edits=[(
        "    return attention_weights(q, k, mask, scale) @ v\n",
        "    return (attention_weights(q, k, mask, scale) @ v).detach().numpy()\n")])
    entry = table["test_attention_weights"]
    assert entry["score"] < entry["max_score"]
    text = cell_report_markdown("test_attention_weights", entry)
    assert "your function returned a numpy.ndarray: return a torch.Tensor" in text


def test_rope_angles_in_float32_hear_about_float64_not_positions(tmp_path):
    spec = AssignmentSpec.load("02-positional")
    line = "angles = positions.to(inv_freq.dtype)[..., None] * inv_freq  # (..., T, d/2)"
    namespace, _ = _whole_notebook(spec, "positional", edits=[
        (line, line.replace("positions.to(inv_freq.dtype)", "positions.float()")
         .replace("* inv_freq ", "* inv_freq.float() "))])
    student = Submission(InProcessKernel(namespace), nb=None, exchange_dir=tmp_path)
    with pytest.raises(CheckFailure, match="only rounding apart") as failure:
        _checks(spec, "test_rope").test_arbitrary_positions_speeds_and_scaling(student)
    assert "position from `positions`" not in str(failure.value)


def _interpreter_ready() -> bool:
    """Whether Triton kernels run in its interpreter in this process: TRITON_INTERPRET=1 must
    be set before the first ``import triton``, which another test may have done already."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from toolkit.kernels import runtime

    return runtime.HAS_TRITON and runtime._interpreted(runtime.tl.max)


def ran_in_a_fresh_process(request) -> bool:
    """Where this process cannot have the interpreter, run the test again in one that
    can (and assert it passed there): True when it did."""
    if _interpreter_ready():
        return False
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", request.node.nodeid, "-q", "-p", "no:cacheprovider"],
        cwd=request.config.rootpath, env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and " passed" in proc.stdout, proc.stdout[-4000:]
    return True


def test_dq_written_with_store_hears_about_atomic_add(tmp_path, request):
    """A backward kernel that stores its dq share keeps one key tile's share per row: dk and
    dv are right, and the check says which write to change. The right kernel passes."""
    if ran_in_a_fresh_process(request):
        return
    spec = AssignmentSpec.load("04-flash-attention")
    add = "tl.atomic_add(DQ + q_ptrs, dq, mask=row_ok[:, None])  # other key tiles add theirs"
    checks = _checks(spec, "test_triton_backward")
    for edits, expect in (([], None), ([(add, "tl.store(DQ + q_ptrs, dq, mask=row_ok[:, None])")],
                                       "write with tl.atomic_add")):
        namespace, _ = _whole_notebook(spec, "flash", edits=edits)
        student = Submission(InProcessKernel(namespace), nb=None, exchange_dir=tmp_path)
        if expect is None:
            checks.test_non_causal_mha(student)
            checks.test_custom_scale_and_tiles(student)
            continue
        for check in (checks.test_non_causal_mha, checks.test_custom_scale_and_tiles):
            with pytest.raises(CheckFailure, match=expect) as failure:
                check(student)
            assert "one tile of 16 keys" in str(failure.value)


def test_a_wrapper_that_returns_only_out_loses_the_lse_checks_alone(tmp_path, request):
    """Forgetting to return lse costs the checks of lse; a right output still earns the
    checks of the output, and the message says why lse is needed."""
    if ran_in_a_fresh_process(request):
        return
    spec = AssignmentSpec.load("04-flash-attention")
    checks = _checks(spec, "test_triton_kernel")
    namespace, _ = _whole_notebook(spec, "flash", edits=[("    return out, lse\n",
                                                          "    return out\n")])
    student = Submission(InProcessKernel(namespace), nb=None, exchange_dir=tmp_path)
    for check in (checks.test_non_causal_mha, checks.test_causal_square, checks.test_gqa_and_mqa):
        check(student)
    for check in (checks.test_lse_is_the_natural_logsumexp, checks.test_fp16_inputs,
                  checks.test_custom_scale_and_tiles, checks.test_rectangular_causal):
        with pytest.raises(CheckFailure, match="should return a tuple .out, lse., got Tensor: "
                                               "the backward pass needs lse"):
            check(student)
