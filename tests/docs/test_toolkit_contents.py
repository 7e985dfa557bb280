"""docs/toolkit.md, the toolkit's table of contents, tells the truth and stays complete.

Every face the registry (``tests/docs/toolkit_contents.py``) names must exist and show
the concept's own code; every teaching module, grade cell, lecture and widget builder
must have a row; and the page must hold the table the registry makes today. A face that
does not exist reads "none yet" on the page, so a missing one shows there.
"""

from __future__ import annotations

import toolkit_contents as contents

from toolkit.widgets import BUILDERS, RESULT_VIEWERS


def test_every_module_named_exists_and_teaching_modules_have_one_home():
    modules = [m for concept in contents.CONCEPTS for m in concept.modules]
    missing = [m for m in [*modules, *contents.SUPPORT] if contents.module_path(m) is None]
    assert not missing, f"no such toolkit module: {missing}"
    twice = sorted({m for m in modules if modules.count(m) > 1}
                   | set(modules) & set(contents.SUPPORT))
    assert not twice, f"modules listed in more than one place: {twice}"
    homeless = sorted(set(contents.teaching_modules()) - set(modules) - set(contents.SUPPORT))
    assert not homeless, (
        "toolkit modules with no row in tests/docs/toolkit_contents.py (add each to the "
        f"concept it teaches, or to SUPPORT with a reason): {homeless}")


def test_every_grade_cell_grades_a_concept_and_has_its_checks():
    cells = contents.grade_cells()
    placed = {cell for concept in contents.CONCEPTS for cell in contents.exercises(concept)}
    assert set(cells) - placed == set(), (
        f"grade cells that grade no concept of the table: {sorted(set(cells) - placed)}")
    for concept in contents.CONCEPTS:
        for assignment, cell in concept.handed_in:
            assert (assignment, cell) in cells, f"{concept.title}: no grade cell {cell}"
            assert not cells[(assignment, cell)], (
                f"{assignment} {cell} scores code, so it is found from its solution cells; "
                "take it out of handed_in")
    # A concept sits in the part that grades it first; a later part may grade it again
    # (08 grades T5's buckets, which share their module with 02's ALiBi).
    order = list(contents.PARTS)
    for part, concepts in contents.PARTS.items():
        for concept in concepts:
            graded = sorted({c[0] for c in contents.exercises(concept)}, key=order.index)
            assert not graded or graded[0] == part, (
                f"{concept.title} sits in {part}, first graded in {graded[0]}")
    unchecked = [cell for cell in cells if not contents.check_files(*cell)]
    assert not unchecked, f"grade cells without a hidden check file: {unchecked}"


def test_the_exercises_are_read_from_the_solutions():
    # The attention exercises of 01 define toolkit.attention's functions; 05's checkpoint
    # cell defines nothing and is placed by hand.
    by_title = {c.title: c for c in contents.CONCEPTS}
    attention = contents.exercises(by_title["Scaled dot-product and multi-head attention"])
    assert ("01-attention", "test_attention_weights") in attention
    assert ("01-attention", "test_multi_head_attention") in attention
    assert ("01-attention", "test_masks") not in attention
    assert contents.exercises(by_title["Pre-training a small BERT"]) == [
        ("05-blocks", "test_checkpoint")]


def test_every_lecture_named_runs_the_concepts_code():
    stems = contents.lecture_stems()
    for concept in contents.CONCEPTS:
        names = contents.concept_names(concept)
        for stem in concept.lectures:
            assert stem in stems, f"{concept.title}: {stem} is not a lecture of course.toml"
            assert contents.uses(contents.lecture_source(stem)) & names, (
                f"{concept.title}: course/{stem}.py uses none of {sorted(names)}")
    unused = set(stems) - {s for c in contents.CONCEPTS for s in c.lectures}
    assert not unused, f"lectures with no row: {sorted(unused)}"


def test_every_widget_named_shows_the_concepts_code():
    builders = {b for table in (BUILDERS, RESULT_VIEWERS) for names in table.values()
                for b in names}
    for concept in contents.CONCEPTS:
        names = contents.concept_names(concept)
        for builder in concept.widgets:
            assert builder in builders, f"{concept.title}: {builder} is not in BUILDERS"
            path = contents.widget_file(builder)
            assert path is not None, f"{builder} is defined nowhere in toolkit/widgets"
            assert contents.uses(path) & names, (
                f"{concept.title}: {path.name} (the module of {builder}) uses none of "
                f"{sorted(names)}")
    placed = {b for c in contents.CONCEPTS for b in c.widgets}
    assert builders <= placed, f"widget builders with no row: {sorted(builders - placed)}"


def test_the_page_holds_the_current_table():
    assert contents.current() == contents.render(), (
        "docs/toolkit.md is out of date: run `.venv/bin/python tests/docs/toolkit_contents.py`")
    assert contents.NONE_YET in contents.render()  # the faces not built yet say so
