"""Every named mistake tells the student what their code did and what to do instead.

The diagnosis shows a mutant's ``explanation`` inside a sentence ("Your answers match a
classic mistake: {explanation}. It explains ..."), so it is one line, starts in lower case
unless it starts with a name (RoPE, KV, ``dK``), and ends without a full stop.
"""

import pytest

from autograder.workspace.assignment_spec import AssignmentSpec
from autograder.workspace.course import ASSIGNMENTS_DIR, available_assignments


@pytest.mark.parametrize("name", available_assignments(ASSIGNMENTS_DIR))
def test_every_mutant_has_an_explanation_that_fits_the_feedback_line(name):
    spec = AssignmentSpec.load(name)
    problems = []
    for mutant in spec.mutants:
        text = mutant.explanation
        first_word = text.split(" ", 1)[0]
        if not text.strip():
            problems.append(f"{mutant.name}: no explanation")
        elif "\n" in text or text.rstrip().endswith("."):
            problems.append(f"{mutant.name}: one line, without a final full stop")
        elif first_word.isalpha() and first_word[0].isupper() and first_word[1:].islower():
            problems.append(f"{mutant.name}: starts a sentence mid-sentence ({first_word!r})")
    assert not problems, f"{name}/assignment.toml:\n" + "\n".join(problems)
