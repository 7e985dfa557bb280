"""The comparison with the reference counts only what goes beyond honest work.

The class of tests/fixtures/similarity (01-attention): seven independent solutions,
among them ``fay``, written the most direct way the notebook's formulas and hints allow,
and two disguised copies of the reference. Each independent solution is judged with the
baseline of the *other* independent solutions (left out, so it never explains itself).
"""

import shutil
import sys
from pathlib import Path

import pytest

from autograder.reports import reference_baseline, similarity
from autograder.reports.similarity import REFERENCE, Match
from autograder.reports.similarity_report import load, run
from autograder.workspace.course import Course

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "similarity"))
import make_class  # noqa: E402

NAME = "01-attention"
EFFICIENT = "03-efficient-attention"
ASSIGNMENTS = Path(__file__).resolve().parents[2] / "assignments"
OF_REFERENCE = [c for c, original in make_class.PLANTED.items() if original == "reference"]


@pytest.fixture(scope="module")
def attention_class(tmp_path_factory):
    course = Course(tmp_path_factory.mktemp("baseline") / "workspace")
    course.init()
    course.release(NAME, exchange=False)
    for student in make_class.INDEPENDENT + list(make_class.PLANTED):
        make_class.hand_in(course, NAME, student, make_class.solutions_of(student))
    students, reference, _ = load(course, NAME)
    return course, students, reference


def _left_out(students, reference, student, panel=make_class.INDEPENDENT):
    """(raw match, discounted match, result) of ``student`` against the reference, the
    baseline taken from the independent solutions other than ``student``."""
    result = similarity.compare(students, reference)
    raw = next(m for m in result.reference if m.a == student)
    others = {a: students[a] for a in panel if a != student}
    reference_baseline.discount(result, reference, others)
    return raw, next(m for m in result.reference if m.a == student), result


def test_formula_close_work_is_near_the_reference_without_the_baseline(attention_class):
    """The problem: the student who writes the formulas most directly shares most of
    the reference's own code (the pairwise measure puts her at the flag), far more
    than students who write in other styles."""
    _, students, reference = attention_class
    raw, _, result = _left_out(students, reference, "fay")
    assert raw.score >= result.settings.threshold - 0.05
    assert raw.score > 2 * next(m.score for m in result.reference if m.a == "ada")


@pytest.mark.parametrize("student", make_class.INDEPENDENT)
def test_independent_work_is_not_flagged_against_the_reference(attention_class, student):
    _, students, reference = attention_class
    _, match, result = _left_out(students, reference, student)
    assert match.score < result.settings.threshold / 2, match
    assert match not in result.flagged()[1]


@pytest.mark.parametrize("copy", OF_REFERENCE)
def test_disguised_copies_of_the_reference_are_still_flagged(attention_class, copy):
    _, students, reference = attention_class
    raw, match, result = _left_out(students, reference, copy)
    assert raw.score == 1.0
    assert match.score >= 0.9 and match in result.flagged()[1], match


def test_without_independent_solutions_the_class_median_is_the_baseline(attention_class):
    _, students, reference = attention_class
    result = similarity.compare(students, reference)
    baseline = reference_baseline.discount(result, reference, {})
    flagged = {m.a for m in result.flagged()[1]}
    assert flagged == set(OF_REFERENCE)
    shares = sorted(m.exercise_score("attention_weights") for m in similarity.compare(
        students, reference).reference if "attention_weights" in m.exercises)
    assert baseline.per_exercise["attention_weights"] == pytest.approx(
        shares[len(shares) // 2] if len(shares) % 2 else
        (shares[len(shares) // 2 - 1] + shares[len(shares) // 2]) / 2)


def test_beyond_the_baseline_is_the_share_past_it_on_the_scale_left():
    match = Match("s", REFERENCE, 0.0, {"a": (8, 10), "b": (3, 10), "c": (10, 20)})
    out = reference_baseline.beyond_baseline(match, {"a": 0.6, "b": 0.5, "c": 1.0})
    # a: 6 of 10 explained, 2 of the 4 left shared ((0.8 - 0.6) / 0.4); b: below its
    # baseline; c: honest work has all of it, so it tells nothing and weighs nothing.
    assert out.exercises == {"a": (2, 4), "b": (0, 5), "c": (0, 0)}
    assert out.score == round(2 / 9, 4) and out.exercise_score("a") == 0.5
    assert out.shared == 21  # the code in common, for min_shared, is what it was
    assert reference_baseline.beyond_baseline(match, {}).score == pytest.approx(21 / 40)


def test_solutions_fill_the_released_stubs_in_order():
    text = "# %% cell\nx = 1\n# %% ---\nreturn x\n# %% other\npass\n"
    assert reference_baseline.read_solutions(text) == {
        "cell": ["x = 1\n", "return x\n"], "other": ["pass\n"]}
    scaffold = ('class A:\n    def f(self):\n        # YOUR CODE HERE\n'
                '        raise NotImplementedError("f")\n\n    def g(self):\n'
                '        # YOUR CODE HERE\n        raise NotImplementedError("g")\n')
    filled = reference_baseline.fill_cell(scaffold, ["if True:\n    y = 2\n"])
    assert "        if True:\n            y = 2\n" in filled
    assert 'NotImplementedError("g")' in filled and 'NotImplementedError("f")' not in filled


@pytest.mark.slow
def test_the_report_reads_the_independent_solutions_kept_with_the_checks(tmp_path):
    """``autograder report --similarity`` takes the baseline from the assignment's
    ``checks/independent/`` (never released) and says what it used."""
    assignments = tmp_path / "assignments"
    shutil.copytree(ASSIGNMENTS / NAME, assignments / NAME)
    panel = assignments / NAME / "checks" / reference_baseline.INDEPENDENT_DIR
    shutil.rmtree(panel, ignore_errors=True)
    panel.mkdir()
    for author in ("fay", "gus"):
        shutil.copy(Path(make_class.HERE) / f"{author}.txt", panel / f"{author}.txt")
    course = Course(tmp_path / "workspace", assignments)
    course.init()
    course.release(NAME, exchange=False)
    assert not list(course.path("release", NAME).rglob("fay.txt"))
    for student in ["ada", "chloe", *OF_REFERENCE]:
        make_class.hand_in(course, NAME, student, make_class.solutions_of(student))
    result, students, reference, _ = run(course, NAME)
    assert set(result.baseline.independent) == {"fay", "gus"}
    # What fay shares with the reference on her most direct exercise is the baseline.
    assert result.baseline.per_exercise["decoder_block"] == pytest.approx(max(
        result.baseline.independent[a]["decoder_block"] for a in ("fay", "gus")))
    assert {m.a for m in result.flagged()[1]} == set(OF_REFERENCE)
    from autograder.reports.similarity_report import as_text

    text = as_text(result, NAME, len(students), None)
    assert "2 independent solution(s) and the class median" in text


@pytest.mark.parametrize("name, fixtures, authors", [
    (NAME, Path(make_class.HERE), ["fay", "gus"]),
    (EFFICIENT, Path(make_class.HERE) / EFFICIENT, ["hana", "ivo", "jo"]),
])
def test_the_course_keeps_independent_solutions_and_they_are_the_fixtures(name, fixtures,
                                                                          authors):
    """An assignment's baseline (checks/independent/) holds fixtures unchanged, each proved
    correct here or by test_similarity's checks."""
    panel = ASSIGNMENTS / name / "checks" / reference_baseline.INDEPENDENT_DIR
    kept = sorted(panel.glob("*.txt"))
    assert [p.stem for p in kept] == authors
    for path in kept:
        assert path.read_text() == (fixtures / path.name).read_text()


# -- 03-efficient-attention: three independent solutions, two of them formula-close ----
@pytest.fixture(scope="module")
def efficient(tmp_path_factory):
    course = Course(tmp_path_factory.mktemp("efficient") / "workspace")
    course.init()
    course.release(EFFICIENT, exchange=False)
    return course


def test_the_03_solutions_are_correct(efficient):
    import json

    import torch

    import toolkit.gqa as gqa
    import toolkit.linear_attention as linear
    import toolkit.masks as masks
    from autograder.reports.similarity import code_solution_cells

    released = json.loads(efficient.path("release", EFFICIENT, "efficient.ipynb").read_text())
    scaffold = code_solution_cells(released)
    imports = next("".join(c["source"]) for c in released["cells"] if c["cell_type"] == "code")
    for path in sorted((Path(make_class.HERE) / EFFICIENT).glob("*.txt")):
        ns: dict = {}
        exec(imports, ns)  # noqa: S102 - the notebook's own imports
        for grade_id, parts in reference_baseline.read_solutions(path.read_text()).items():
            exec(reference_baseline.fill_cell(scaffold[grade_id], parts), ns)  # noqa: S102
        for n, window, dilation, causal in [(9, 3, 2, True), (9, 3, 2, False), (7, 2, 1, True),
                                            (8, 4, 3, False), (5, 9, 1, True)]:
            assert torch.equal(ns["dilated_mask"](n, window, dilation, causal),
                               masks.dilated_mask(n, window, dilation, causal)), path.stem
        g = torch.Generator().manual_seed(0)
        q, k = (torch.randn(2, 3, 6, 4, dtype=torch.float64, generator=g) for _ in range(2))
        v = torch.randn(2, 3, 6, 5, dtype=torch.float64, generator=g)
        for fn in ("linear_attention", "causal_linear_attention"):
            torch.testing.assert_close(ns[fn](q, k, v), getattr(linear, fn)(q, k, v))
        x = torch.randn(2, 2, 5, 4, generator=g)
        assert torch.equal(ns["repeat_kv"](x, 3), gqa.repeat_kv(x, 3))
        cache, expected = ns["DynamicKVCache"](), gqa.DynamicKVCache()
        for layer, t in [(1, 2), (0, 3), (1, 1)]:
            step = (torch.full((1, 2, t, 4), float(t)), torch.ones(1, 2, t, 4))
            for got, want in zip(cache.append(layer, *step), expected.append(layer, *step),
                                 strict=True):
                assert torch.equal(got, want)
            assert len(cache.keys) == len(expected.keys)


def test_in_03_formula_close_work_is_spared_and_a_disguised_copy_is_not(efficient):
    authors, reference = reference_baseline.panel_and_reference(
        efficient, EFFICIENT, Path(make_class.HERE) / EFFICIENT)
    rows = {who: (raw, now, flag_raw, flag_now) for who, raw, now, flag_raw, flag_now
            in reference_baseline.left_out(authors, reference)}
    # Without the baseline the two who follow the notebook's formulas are flagged...
    assert rows["hana"][2] and rows["jo"][2] and not rows["ivo"][2]
    # ...with it (each judged by the others) none is, and the copy still is.
    assert not any(rows[a][3] for a in ("hana", "jo", "ivo"))
    assert max(rows[a][1] for a in ("hana", "jo", "ivo")) < 0.5
    copy = rows[reference_baseline.DISGUISED]
    assert copy[3] and copy[1] == 1.0


def test_a_formula_follower_is_not_paired_with_a_copy_of_the_reference(attention_class):
    """One who copied the reference is as alike to an honest student who follows the
    formulas as the reference is; copies of another student stay flagged."""
    _, students, reference = attention_class

    def pair(result, a, b):
        return next(m for m in result.pairs if {m.a, m.b} == {a, b})

    _, _, result = _left_out(students, reference, "fay")
    raw = pair(similarity.compare(students, reference), "fay", "disguised-reference")
    assert raw.score >= 0.5
    assert pair(result, "fay", "disguised-reference").score < 0.3
    for copy, original in make_class.PLANTED.items():
        if original != "reference":
            assert pair(result, copy, original).score >= 0.9
            assert pair(result, copy, original) in result.flagged()[0]
