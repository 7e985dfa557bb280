"""Written answers (read by a person) are a real share of the course: at least 15% of all
points, as ``autograder points`` prints it."""

from autograder.cli.commands import main
from autograder.workspace.assignment_spec import AssignmentSpec
from autograder.workspace.course import ASSIGNMENTS_DIR, available_assignments


def test_points_prints_each_assignment_and_the_written_share(capsys):
    assert main(["points", "--min-written-share", "0.15"]) == 0
    out = capsys.readouterr().out
    for name in available_assignments(ASSIGNMENTS_DIR):
        assert name in out
    assert "written share:" in out


def test_written_answers_are_at_least_15_percent_of_the_course():
    automatic = written = 0.0
    for name in available_assignments(ASSIGNMENTS_DIR):
        a, w = AssignmentSpec.load(name).points()
        automatic, written = automatic + a, written + w
    assert written / (automatic + written) >= 0.15, (
        f"written answers are {written:g} of {automatic + written:g} points: add written "
        "questions (manually graded answer cells) or weigh them more")


def test_min_written_share_fails_when_the_share_is_below(capsys):
    assert main(["points", "--min-written-share", "0.99"]) == 1
