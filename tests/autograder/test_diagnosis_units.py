"""The pieces of the diagnosis by fingerprint, without a kernel (see test_diagnosis.py)."""

import math

import torch

from autograder.grading.diagnosis import explanation_of, fingerprint_matches, same_answer, usable
from autograder.grading.scoring import attempted, score_cells
from autograder.jobs import CheckRecord
from autograder.protocol.trusted import Exchange, ForbiddenShortcut, SubmissionError
from autograder.reports.feedback_page import maths_to_mathml, part_name, summary_markdown
from autograder.workspace.assignment_spec import Mutant


def _reply(value):
    """What the kernel bridge answers for a tensor result."""
    return {"ok": True, "violations": [], "result": {"type": "tensor", "key": "t0"}}, {"t0": value}


def test_same_answer_is_tolerant_to_rounding_but_not_to_mistakes():
    x = torch.randn(3, 4, dtype=torch.float64)
    assert same_answer(x, x + 1e-9)
    assert same_answer(x.float(), x)  # a float32 answer of the same values
    assert not same_answer(x, x * 1.01)
    assert not same_answer(x, x[:2])
    nan = torch.tensor([math.nan, 1.0])
    assert same_answer(nan, nan.clone())
    assert same_answer((x, 3), [x, 3]) and not same_answer((x, 3), (x, 4))
    assert same_answer({"a": 1.0}, {"a": 1.0 + 1e-12}) and not same_answer({"a": 1}, {"b": 1})
    assert not same_answer(x, 1.0)


def test_fingerprint_needs_every_answer_to_agree_and_one_real_value():
    x = torch.randn(2, 2, dtype=torch.float64)
    wrong = Exchange({}, {}, SubmissionError("ValueError: bad mask (line 3: raise ...)"))
    right = Exchange({}, {}, x)
    error_reply = ({"ok": False, "error": "ValueError: something else"}, {})
    assert fingerprint_matches([right, wrong], [_reply(x.clone()), error_reply])
    assert not fingerprint_matches([right], [_reply(x + 1)])
    assert not fingerprint_matches([wrong], [error_reply])  # errors alone prove nothing
    assert not fingerprint_matches([wrong], [_reply(x)])


def test_stubs_and_shortcuts_are_never_diagnosed():
    stub = Exchange({}, {}, SubmissionError("NotImplementedError: `f` is not written yet"))
    shortcut = Exchange({}, {}, ForbiddenShortcut("your code called torch.softmax"))
    value = Exchange({}, {}, torch.zeros(1))
    assert usable([value])
    assert not usable([]) and not usable([stub, value]) and not usable([shortcut, value])


def _check(passed, message="", **flags):
    return CheckRecord(id="t", module="m", description="d", grade_cell="g", passed=passed,
                       message=message, **flags)


def test_not_attempted_and_gated_checks():
    stub = _check(False, "NotImplementedError: `f` is not written yet")
    assert not attempted([stub, stub])
    assert attempted([stub, _check(False, "differs from the expected values")])
    # A stub whose __init__ makes the parameters passes the parameter-names check: that
    # earns nothing and says nothing about an attempt.
    names = _check(True, structural=True)
    assert not attempted([names, stub]) and attempted([names, _check(True), stub])
    prop, wrong, right = _check(True, property=True), _check(False, "differs"), _check(True)
    assert score_cells({"g": 2}, [prop, wrong])["g"]["score"] == 0  # a constant passes prop
    assert score_cells({"g": 3}, [prop, wrong, right])["g"]["score"] == 2


def test_maths_become_mathml_and_code_is_left_alone():
    text = "Scores $q \\cdot k$ and $$\\frac{1}{\\sqrt{d_k}}$$ but `a $ b $ c` and costs $5"
    out = maths_to_mathml(text)
    assert out.count("<math") == 2 and 'display="block"' in out
    assert "`a $ b $ c`" in out and "costs $5" in out
    assert "\\frac" not in out
    assert "```\n$x$\n```" in maths_to_mathml("```\n$x$\n```")


def test_maths_in_a_heading_stay_mathml_through_its_anchor():
    """nbconvert re-serialises a heading to give it an anchor: MathML with its XML namespace
    came out as ns0:math, which browsers do not draw."""
    from nbconvert.filters.markdown import markdown2html_mistune

    page = markdown2html_mistune(maths_to_mathml("### Why divide by $\\sqrt{d_k}$?"))
    assert "<math display=\"inline\"><mrow><msqrt>" in page and "ns0" not in page, page


def test_summary_names_parts_and_keeps_points_apart():
    assert part_name(["1. Attention", "Exercise 1a: weights", "Exercise 1b: `sdpa`"]) == (
        "Exercise 1a: weights + Exercise 1b: sdpa")
    assert part_name(["6. Which family?"]) == "6. Which family?"
    # Underscores of a name stay; only emphasis marks go.
    assert part_name(["Exercise 2: `swiglu_hidden_dim` and **_GatedFeedForward_**"]) == (
        "Exercise 2: swiglu_hidden_dim and GatedFeedForward")
    parts = [
        {"grade_id": "test_a", "name": "Exercise 1", "kind": "hidden checks", "manual": False,
         "score": 2.5, "points": 3.0},
        {"grade_id": "q", "name": "Question", "kind": "written answer", "manual": True,
         "score": None, "points": 2.0},
    ]
    text = summary_markdown(parts)
    assert "[Exercise 1](#test_a)" in text and "2 pending" in text
    assert "**Automatic points** (hidden checks): 2.5 / 3" in text
    assert "0 / 2, 2 point(s) not graded yet" in text
    assert "**Total**: 2.5 / 5" in text


def test_a_mistake_that_answers_like_the_solution_explains_nothing():
    """A student's float32 gates or int32 indices (right values, wrong dtype) equal, at the
    diagnosis's tolerance, both the solution and any mutant that is right on those inputs:
    such a mutant must not be named as the cause."""
    x = torch.randn(2, 2, dtype=torch.float64)
    student = [Exchange({}, {}, x.float())]  # right values, failed on dtype
    harmless = [_reply(x.clone())]  # the mutant is right on this input
    solution = [_reply(x.clone())]
    assert fingerprint_matches(student, harmless)  # without the solution's answers: fooled
    assert not fingerprint_matches(student, harmless, solution)
    # A mutant that answers differently from the solution, as the student did, explains it.
    wrong = [Exchange({}, {}, x + 1)]
    assert fingerprint_matches(wrong, [_reply(x + 1)], solution)
    # Differing by an error counts too: the solution raises, the mistake and student do not.
    raising = [({"ok": False, "error": "ValueError: bad"}, {})]
    assert fingerprint_matches(wrong, [_reply(x + 1)], raising)


def test_mistake_oracle_leaves_no_scratch_folder_behind(tmp_path):
    """The oracle's helper executes instructor variants in a scratch folder of its own: it
    removes it when closed, and a helper killed outright (its grader killed by a signal or a
    scheduler) has its folder removed by the next helper that starts."""
    import os
    import signal
    import tempfile
    from pathlib import Path

    from autograder.grading.oracle import MistakeOracle

    def scratch_of(pid):
        return set(Path(tempfile.gettempdir()).glob(f"autograder-oracle-{pid}-*"))

    source = "# %%\ndef double(x):\n    return 2 * x\n"
    request = ({"kind": "call", "name": "double", "args": [{"type": "int", "value": 3}]}, {})
    six = {"type": "int", "value": 6}

    killed = MistakeOracle()
    [(reply, _)] = killed.replay("reference", source, tmp_path, [request])
    assert reply["ok"] and reply["result"] == six, reply
    pid = killed._process.pid
    assert len(scratch_of(pid)) == 1
    os.kill(pid, signal.SIGKILL)
    killed._process.wait()
    assert len(scratch_of(pid)) == 1  # what a kill leaves

    oracle = MistakeOracle()
    try:
        [(reply, _)] = oracle.replay("reference", source, tmp_path, [request])
        assert reply["ok"] and reply["result"] == six, reply
        assert not scratch_of(pid), "the next helper should sweep a dead helper's folder"
        live = oracle._process.pid
        assert len(scratch_of(live)) == 1
    finally:
        oracle.close()
    assert not scratch_of(live)


def test_the_feedback_line_prefers_the_explanation_and_keeps_names_capitalised():
    def mutant(pitfall, explanation=""):
        return Mutant("m", pitfall, "nb", "find", "replace", ["test_x"], explanation)

    assert explanation_of(mutant("Forgot the scale", "you left out 1/sqrt(d_k).")) == (
        "you left out 1/sqrt(d_k)")  # the message adds its own full stop
    assert explanation_of(mutant("Forgotten 1/sqrt(d_k)")) == "forgotten 1/sqrt(d_k)"
    for name in ("RoPE layouts mixed", "YaRN ramp reversed", "KV cache overwritten",
                 "Post-LN where Pre-LN was asked", "dK/dV not summed"):
        assert explanation_of(mutant(name)) == name


def test_a_contradicted_mistake_is_not_replayed_on_the_rest_of_its_exercise(tmp_path):
    """A mistake that answers one failing check wrongly, but not as the student did, is
    ruled out for that exercise: the oracle (a real one) is not asked about the exercise's
    other checks. The mistake the student did make is replayed on every check (in messages
    of one check, then two) and named."""
    import types

    from autograder.grading.diagnosis import diagnose
    from autograder.grading.oracle import MistakeOracle

    source = "# %%\ndef double(x):\n    return 2 * x\n"
    mutants = [
        Mutant("plus-two", "Adds two", "nb", "2 * x", "x + 2", ["test_double"]),
        Mutant("off-by-one", "One too many", "nb", "2 * x", "2 * x + 1", ["test_double"]),
    ]
    spec = types.SimpleNamespace(name="toy", path=tmp_path, mutants=mutants,
                                 source_text=lambda notebook: source)
    inputs = (3, 5, 7)
    checks = [CheckRecord(id=f"test_{x}", module="test_nb", description="",
                          grade_cell="test_double") for x in inputs]

    def asked_double(x):
        return {"kind": "call", "name": "double", "args": [{"type": "int", "value": x}]}

    # the student wrote 2 x + 1
    transcripts = {f"test_nb::test_{x}": [Exchange(asked_double(x), {}, 2 * x + 1)]
                   for x in inputs}
    oracle, asked = MistakeOracle(), []
    replay = oracle.replay

    def counting_replay(variant, text, folder, requests):
        asked.append((variant.split("/")[2], len(requests)))
        return replay(variant, text, folder, requests)

    oracle.replay = counting_replay
    try:
        found = diagnose(spec, "nb", checks, transcripts, oracle)
    finally:
        oracle.close()
    assert [(d.mutant, len(d.checks)) for d in found] == [("off-by-one", 3)]
    assert "Adds two" in found.ruled_out["test_double"]

    def requests(variant):
        return sum(n for name, n in asked if name == variant)

    assert requests("mutant-plus-two") == 1, asked  # its first check settles it
    assert requests("mutant-off-by-one") == 3, asked  # the first check, then the two others
    assert asked.count(("mutant-off-by-one", 2)) == 1, asked  # in one message
    assert requests("reference") == 3, asked


def test_half_precision_answers_agree_to_their_last_bits_and_no_further():
    """The same code run twice can round a half-precision answer a unit in the last place
    apart: that still matches. A real difference does not, and float32 keeps its
    tolerance."""
    x = torch.linspace(-4, 4, 64)
    for dtype in (torch.float16, torch.bfloat16):
        half = x.to(dtype)
        one_ulp = (half.view(torch.int16) + 1).view(dtype)  # the next value, one bit away
        assert not torch.equal(half, one_ulp)
        assert same_answer(half, one_ulp), dtype
        assert not same_answer(half, (x * 1.05).to(dtype)), dtype
    assert not same_answer(x, x * (1 + 1e-3))  # float32: 1e-4 relative, as before


def test_a_focused_run_counts_the_cells_it_left_out_as_passed(tmp_path):
    """`autograder validate` grades a made mutant on the cells it breaks only. A mistake of
    a cell left out (a helper) that answers the graded cell's checks just as the student's
    own mistake does must not be named: in a whole grading the helper's checks would have
    passed and ruled it out."""
    import types

    from autograder.grading.diagnosis import diagnose
    from autograder.grading.oracle import MistakeOracle

    source = ("# %%\ndef helper(x):\n    return 2 * x\n\n"
              "# %%\ndef use(x):\n    return helper(x) + 1\n")
    mutants = [  # both make use(x) = 3 x + 1
        Mutant("helper-triples", "Triples", "nb", "2 * x", "3 * x", ["test_helper", "test_use"]),
        Mutant("use-triples", "Uses 3 x", "nb", "helper(x) + 1", "3 * x + 1", ["test_use"]),
    ]
    spec = types.SimpleNamespace(name="toy", path=tmp_path, mutants=mutants,
                                 source_text=lambda notebook: source)
    use = CheckRecord(id="test_use_3", module="test_nb", description="", grade_cell="test_use")
    helper = CheckRecord(id="test_helper_3", module="test_nb", description="",
                         grade_cell="test_helper", passed=True)
    transcripts = {"test_nb::test_use_3": [Exchange(
        {"kind": "call", "name": "use", "args": [{"type": "int", "value": 3}]}, {}, 10)]}
    oracle = MistakeOracle()
    try:
        focused = diagnose(spec, "nb", [use], transcripts, oracle, graded_cells=("test_use",))
        whole = diagnose(spec, "nb", [use, helper], transcripts, oracle)
    finally:
        oracle.close()
    assert [d.mutant for d in focused] == ["use-triples"]
    assert [d.mutant for d in whole] == ["use-triples"]
