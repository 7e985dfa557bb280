"""An instructor who runs a command too early is told which command comes first.

Collect, grade, report, feedback and export all read what `autograder release` wrote in
the gradebook, and feedback reads what `autograder grade` wrote. Run before those, each
exits with status 2 and one line naming the command to run, never a traceback. A command
whose arguments contradict each other is refused before it changes anything.
"""

import pytest

from autograder.authoring.scaffold import new_assignment
from autograder.cli import main
from autograder.workspace.course import Course


@pytest.fixture(scope="module")
def unreleased(tmp_path_factory):
    """A workspace whose one assignment, ``00-tiny``, has not been released."""
    root = tmp_path_factory.mktemp("course")
    new_assignment("00-tiny", root / "assignments", title="Tiny: softmax")
    course = Course(root / "workspace", root / "assignments")
    course.init()
    return course


@pytest.mark.parametrize("command", [
    ["collect"], ["grade"], ["report"], ["report", "--format", "json"], ["report", "--similarity"],
    ["feedback"], ["export"],
])
def test_before_release_each_command_names_release(unreleased, command, capsys):
    code = main([*command[:1], "00-tiny", *command[1:], "--course", str(unreleased.root)])
    out = capsys.readouterr()
    assert code == 2, out
    assert "Traceback" not in out.err
    assert f"autograder release 00-tiny --course {unreleased.root}" in out.err


def test_an_unknown_name_lists_the_known_ones(unreleased, capsys):
    code = main(["report", "00-tinny", "--course", str(unreleased.root)])
    assert code == 2
    assert "no assignment '00-tinny'" in capsys.readouterr().err


def test_feedback_before_grading_names_grade(tiny_course, capsys):
    code = main(["feedback", "00-tiny", "--course", str(tiny_course.root)])
    out = capsys.readouterr()
    assert code == 2, out
    assert "Traceback" not in out.err
    assert f"autograder grade 00-tiny --course {tiny_course.root}" in out.err


def test_release_refuses_a_name_together_with_all(unreleased, capsys):
    code = main(["release", "00-tiny", "--all", "--course", str(unreleased.root)])
    assert code == 2
    assert "release 00-tiny or --all, not both" in capsys.readouterr().err
    assert not unreleased.path("release", "00-tiny").exists()


@pytest.mark.parametrize("option", [["--workers", "0"], ["--workers", "2.5"],
                                    ["--cell-timeout", "-5"]])
def test_grade_refuses_counts_and_limits_that_are_not_positive(tiny_course, option, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["grade", "00-tiny", *option, "--course", str(tiny_course.root)])
    assert stopped.value.code == 2
    assert f"argument {option[0]}: " in capsys.readouterr().err


@pytest.mark.parametrize("options, complaint", [
    (["--threshold", "0.5"], "--threshold only applies to the similarity report"),
    (["--html", "pairs.html", "--min-tokens", "20"],
     "--min-tokens, --html only applies to the similarity report"),
    (["--similarity", "--plot", "scores.png"], "--plot is for the score report"),
])
def test_report_refuses_an_option_of_the_other_report(tiny_course, options, complaint,
                                                      tmp_path, monkeypatch, capsys):
    """Each option belongs to one of the two reports; given to the other it would be
    ignored in silence, so it is refused, with the command that uses it."""
    monkeypatch.chdir(tmp_path)
    code = main(["report", "00-tiny", *options, "--course", str(tiny_course.root)])
    err = capsys.readouterr().err
    assert code == 2 and complaint in err, err
    assert f"--course {tiny_course.root}" in err
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize("share", ["60", "0", "-0.5", "many"])
def test_similarity_threshold_is_a_share(tiny_course, share, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["report", "00-tiny", "--similarity", "--threshold", share,
              "--course", str(tiny_course.root)])
    assert exited.value.code == 2
    assert "argument --threshold" in capsys.readouterr().err
