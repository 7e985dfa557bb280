"""`autograder roster`: the class list goes into the gradebook, and a bad file changes nothing."""

from __future__ import annotations

import pytest

from autograder.cli import main
from autograder.workspace.course import Course
from autograder.workspace.roster import import_roster


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    course = Course(tmp_path_factory.mktemp("roster") / "course")
    course.init()
    return course


@pytest.fixture
def course(workspace):
    """The module's workspace with an empty class list."""
    with workspace.gradebook() as gb:
        for student in list(gb.students):
            gb.remove_student(student.id)
    return workspace


def _students(course):
    with course.gradebook() as gb:
        return {s.id: (s.first_name, s.last_name, s.email, s.lms_user_id) for s in gb.students}


def test_names_arrive_and_a_second_file_updates_only_what_it_has(course, tmp_path):
    first = tmp_path / "class.csv"
    # As a spreadsheet saves it: a byte-order mark, CRLF, a quoted comma, a blank line.
    first.write_bytes("\ufeffid,first_name,last_name,email\r\n"
                      'ada,Ada,"Lovelace, Countess",ada@example.edu\r\n\r\n'
                      "alan,Alan,Turing,\r\n".encode())
    assert import_roster(course, first) == (2, 0)
    assert _students(course) == {"ada": ("Ada", "Lovelace, Countess", "ada@example.edu", None),
                                 "alan": ("Alan", "Turing", None, None)}
    ids = tmp_path / "canvas-ids.csv"
    ids.write_text("id,lms_user_id\nalan,4242\ngrace,4343\n")
    assert import_roster(course, ids) == (1, 1)
    assert _students(course) == {"ada": ("Ada", "Lovelace, Countess", "ada@example.edu", None),
                                 "alan": ("Alan", "Turing", None, "4242"),
                                 "grace": (None, None, None, "4343")}


@pytest.mark.parametrize("text, says", [
    ("student,first_name\nada,Ada\n", "with `id`"),
    ("id,name\nada,Ada\n", "unknown column(s) ['name']"),
    ("id,last_name\nada,Lovelace\n\n,Turing\n", "line 4 has no `id`"),
    ("id,last_name\nada,Lovelace\nada,Byron\n", "line 3 repeats the id 'ada' of line 2"),
    ("id,last_name\nada,Lovelace, Countess\n", "line 2 has more cells than the header"),
])
def test_a_bad_roster_names_the_line_and_changes_nothing(course, tmp_path, capsys, text, says):
    good = tmp_path / "good.csv"
    good.write_text("id,last_name\nada,Lovelace\n")
    import_roster(course, good)
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    assert main(["roster", str(bad), "--course", str(course.root)]) == 2
    err = capsys.readouterr().err
    assert f"autograder: {bad}: " in err and says in err, err
    assert _students(course) == {"ada": (None, "Lovelace", None, None)}


def test_the_command_reports_what_it_did(course, tmp_path, capsys):
    roster = tmp_path / "class.csv"
    roster.write_text("id,first_name,last_name\nada,Ada,Lovelace\n")
    assert main(["roster", str(roster), "--course", str(course.root)]) == 0
    assert "1 student(s) added, 0 updated" in capsys.readouterr().out


@pytest.mark.parametrize("text", [
    "\ufeffid,first_name,last_name\r\nada,Ada,Lovelace\r\n",  # Excel's "CSV UTF-8"
    "id;first_name;last_name\nada;Ada;Lovelace\n",  # a decimal-comma locale
    "id\tfirst_name\tlast_name\nada\tAda\tLovelace\n",  # tab-separated
    "ID,First Name,Last Name\nada,Ada,Lovelace\n",  # headers typed by a person
])
def test_spreadsheet_dialects_read_the_same(course, tmp_path, text):
    roster = tmp_path / "class.csv"
    roster.write_text(text, encoding="utf-8")
    assert import_roster(course, roster) == (1, 0)
    assert _students(course) == {"ada": ("Ada", "Lovelace", None, None)}
