"""The extension's REST API in a real Jupyter server: real grading, nothing mocked.

Checks run the real pipeline (nbgrader sanitising, a sandboxed kernel, the hidden checks
of 01-attention in a worker process) on the notebooks ``autograder validate`` grades.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re

import nbformat
import pytest
from tornado.httpclient import HTTPClientError

from autograder.authoring.submissions import TAMPER_PATCH
from autograder.labext.service_side.visibility import _FORMULA

ASSIGNMENT = "01-attention"

pytestmark = pytest.mark.slow
AUTO_POINTS = {"test_attention_weights": 3.0, "test_masks": 2.0,
               "test_multi_head_attention": 3.0, "test_decoder_block": 3.0}


def _lab(jp_serverapp):
    return jp_serverapp.web_app.settings["autograder_course_lab"]


def _scores(answer) -> dict:
    return {e["name"]: e["score"] for e in answer["exercises"] if e["kind"] == "auto"}


async def test_course_lists_outline_exercises_and_points(jp_fetch):
    course = json.loads((await jp_fetch("autograder", "api", "course")).body)
    assert course["problem"] is None and course["title"]
    names = [a["name"] for a in course["assignments"]]
    assert names[0] == ASSIGNMENT and names == sorted(names)
    first = course["assignments"][0]
    assert first["released"] and first["notebooks"] == [
        {"id": "attention", "path": f"release/{ASSIGNMENT}/attention.ipynb"}]
    auto = {e["name"]: e["max_score"] for e in first["exercises"] if e["kind"] == "auto"}
    assert auto == AUTO_POINTS
    assert [e["kind"] for e in first["exercises"]].count("manual") == 2  # two written answers
    assert {e["status"] for e in first["exercises"]} == {"unchecked"}
    assert not any(a["released"] for a in course["assignments"][1:])


async def test_reference_full_marks_and_latest_result_in_course(check, save, notebooks,
                                                                jp_fetch):
    status, answer = await check(save(notebooks["reference"]))
    assert status == 200, answer
    assert answer["assignment"] == ASSIGNMENT and answer["notebook"] == "attention"
    assert (answer["score"], answer["max_score"]) == (11.0, 11.0)
    assert _scores(answer) == AUTO_POINTS
    statuses = {e["name"]: e["status"] for e in answer["exercises"]}
    assert statuses["families_question"] == "waiting"  # a written answer: a person grades it
    assert all(c["passed"] for e in answer["exercises"] for c in e["checks"])
    course = json.loads((await jp_fetch("autograder", "api", "course")).body)
    listed = {e["name"]: e["status"] for e in course["assignments"][0]["exercises"]}
    assert listed == statuses


async def test_stub_scores_zero_and_says_what_is_missing(check, save, notebooks, jp_fetch):
    status, answer = await check(save(notebooks["stub"]))
    assert status == 200, answer
    assert answer["score"] == 0.0 and answer["max_score"] == 11.0
    failed = [c for e in answer["exercises"] for c in e["checks"] if not c["passed"]]
    assert failed and all("NotImplementedError" in c["message"] for c in failed)
    # Said once per exercise, and kept in the outline the panel draws after a check.
    reasons = {e["name"]: e["shared_reason"] for e in answer["exercises"] if e["kind"] == "auto"}
    assert all(r and r.startswith("not written yet: `") for r in reasons.values()), reasons
    course = json.loads((await jp_fetch("autograder", "api", "course")).body)
    listed = {e["name"]: (e["shared_reason"], e["waiting_on_values"])
              for e in course["assignments"][0]["exercises"] if e["kind"] == "auto"}
    assert listed == {e["name"]: (e["shared_reason"], e["waiting_on_values"])
                      for e in answer["exercises"] if e["kind"] == "auto"}


async def test_mutant_loses_exactly_the_points_of_what_it_breaks(check, save, notebooks,
                                                                  course):
    mutant = next(m for m in course.spec(ASSIGNMENT).mutants
                  if m.name == "cross-attention-on-decoder")
    status, answer = await check(save(notebooks[f"mutant-{mutant.name}"]))
    assert status == 200, answer
    scores = _scores(answer)
    for name, points in AUTO_POINTS.items():
        if name in mutant.breaks:
            assert scores[name] < points, (name, scores)
        else:
            assert scores[name] == points, (name, scores)
    lost = sum(AUTO_POINTS[b] - scores[b] for b in mutant.breaks)
    assert answer["score"] == pytest.approx(11.0 - lost)
    # The mistake is named: explained by the diagnosis at the top of the exercise (its
    # checks then carry no hint of their own), or as the pitfall of a check no diagnosis
    # explains.
    diagnoses = [d for e in answer["exercises"] for d in e["diagnoses"]]
    pitfalls = [c["pitfall"] for e in answer["exercises"] for c in e["checks"]]
    assert (any(mutant.explanation in d for d in diagnoses)
            or mutant.pitfall in pitfalls), (diagnoses, pitfalls)


async def test_the_course_outline_keeps_what_to_fix_first(check, save, notebooks, jp_fetch):
    """The panel draws the outline (GET course) after a check: the diagnosis, and the
    earlier exercise to fix first, must be in it, not only in the check's answer."""
    status, answer = await check(save(notebooks["mutant-no-scale"]))
    assert status == 200, answer
    answered = {e["name"]: e["diagnoses"] for e in answer["exercises"]}
    assert any("1/sqrt(d_k)" in d for d in answered["test_attention_weights"]), answered
    course = json.loads((await jp_fetch("autograder", "api", "course")).body)
    listed = {e["name"]: e["diagnoses"] for e in course["assignments"][0]["exercises"]}
    assert listed == answered


async def test_patching_allclose_gains_nothing(check, save, notebooks):
    stub = copy.deepcopy(notebooks["stub"])
    stub.cells.insert(1, nbformat.v4.new_code_cell(TAMPER_PATCH))
    status, answer = await check(save(stub))
    assert status == 200 and answer["score"] == 0.0, answer
    status, answer = await check(save(notebooks["tamper-allclose"], "tampered.ipynb"))
    assert status == 200 and answer["score"] == 0.0, answer


async def test_answers_never_carry_check_source_inputs_or_expected_values(check, save,
                                                                           notebooks, course):
    answers = [(await check(save(notebooks[s], f"{s}.ipynb")))[1]
               for s in ("mutant-no-scale", "mutant-inverted-causal")]
    text = json.dumps(answers)
    source = "\n".join(p.read_text() for p in course.spec(ASSIGNMENT).checks_dir().glob("*.py"))
    code_lines = {line.strip() for line in source.splitlines() if len(line.strip()) > 30
                  and not line.strip().startswith(("#", '"', "'", "hint=", "@pytest.mark"))}
    leaked = [line for line in code_lines if line in text]
    assert not leaked, leaked
    for answer in answers:
        for exercise in answer["exercises"]:
            for c in exercise["checks"]:
                # No values, no inputs: the only digits are an author's axes and reciprocals
                # (q.size(-1), dim=-1, 1/sqrt(d_k)), which are part of a formula.
                assert not re.search(r"\d", _FORMULA.sub("", c["message"] or "")), c
                assert not re.search(r"\[[^\]]*\d", c["name"]), c  # cases numbered, not shown


async def test_visibility_names_score_and_off(check, save, notebooks, course, tmp_path):
    outline = tmp_path / "course.toml"
    settings = course.root / "autograder.json"
    saved = settings.read_text()
    try:
        for visibility in ("names", "score", "off"):
            outline.write_text(f'assignments = [{{ name = "{ASSIGNMENT}", '
                               f'visibility = "{visibility}" }}]\n')
            settings.write_text(json.dumps({**json.loads(saved), "course_file": str(outline)}))
            status, answer = await check(save(notebooks["mutant-no-scale"]))
            if visibility == "off":
                assert status == 403 and "switched off" in answer["message"]
                continue
            assert status == 200 and answer["visibility"] == visibility
            checks = [c for e in answer["exercises"] for c in e["checks"]]
            if visibility == "names":
                assert checks and all(c["message"] is c["hint"] is c["pitfall"] is None
                                      for c in checks)
            else:
                assert not checks and answer["score"] < 11.0
    finally:
        settings.write_text(saved)


@pytest.mark.parametrize("path, status", [
    ("../outside.ipynb", 403),
    ("release/../../outside.ipynb", 403),
    ("/etc/passwd", 400),
    ("link-out/passwd.ipynb", 403),
    ("release/01-attention/attention.py", 400),
    ("release/01-attention/missing.ipynb", 404),
])
async def test_bad_paths_are_refused(check, course, path, status):
    link = course.root / "link-out"
    if not link.exists():
        link.symlink_to("/etc")
    (course.root.parent / "outside.ipynb").write_text("{}")
    code, answer = await check(path)
    assert code == status and answer["message"], answer


async def test_broken_and_foreign_notebooks_get_a_4xx_that_says_why(check, save, notebooks):
    code, answer = await check(save(b'{"cells": [ not json', "broken.ipynb"))
    assert code == 400 and "not valid notebook JSON" in answer["message"]
    foreign = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
    foreign.metadata["autograder"] = {"assignment": "99-unknown", "notebook": "x"}
    code, answer = await check(save(foreign, "x.ipynb"))
    assert code == 404 and "99-unknown" in answer["message"]
    code, answer = await check(save(nbformat.v4.new_notebook(), "plain.ipynb"))
    assert code == 404 and "not an assignment notebook" in answer["message"]


async def test_no_request_without_the_token(http_server_client, jp_base_url):
    for method, body in (("GET", None), ("POST", json.dumps({"path": "x.ipynb"}))):
        with pytest.raises(HTTPClientError) as refused:
            await http_server_client.fetch(
                f"{jp_base_url}autograder/api/{'course' if method == 'GET' else 'check'}",
                method=method, body=body, follow_redirects=False)
        assert refused.value.code == 403


async def test_second_request_while_checking_is_already_checking(check, save, notebooks,
                                                                 jp_serverapp):
    slow = copy.deepcopy(notebooks["reference"])
    slow.cells.insert(1, nbformat.v4.new_code_cell("import time\ntime.sleep(6)"))
    first = asyncio.ensure_future(check(save(slow)))
    lab = _lab(jp_serverapp)
    for _ in range(200):
        if lab._busy:
            break
        await asyncio.sleep(0.05)
    status, answer = await check(save(notebooks["stub"], "other.ipynb"))
    assert status == 409 and "already checking" in answer["message"], answer
    assert answer["retry_after"] > 0  # the panel says when to try again
    status, answer = await first
    assert status == 200 and answer["score"] == 11.0, answer


async def test_results_cached_by_content_hash_and_cooldown(check, save, notebooks,
                                                           jp_serverapp):
    nb = copy.deepcopy(notebooks["mutant-masks-or"])
    status, first = await check(save(nb))
    assert status == 200 and not first["cached"]
    _lab(jp_serverapp).cooldown_seconds = 3600
    for cell in nb.cells:  # running cells changes outputs, not the work
        if cell.cell_type == "code":
            cell.outputs = [nbformat.v4.new_output("stream", text="ran\n")]
    status, again = await check(save(nb))
    assert status == 200 and again["cached"], again
    when = ("cached", "checked_at", "saved_at")  # when it was saved and checked, not what
    assert {k: v for k, v in again.items() if k not in when} == {
        k: v for k, v in first.items() if k not in when}
    nb.cells.append(nbformat.v4.new_code_cell("# a new idea"))
    status, answer = await check(save(nb))
    assert status == 429 and "wait" in answer["message"], answer
    # The refusal says when to try again, in words and as a number the panel counts down.
    assert 3500 < answer["retry_after"] <= 3600, answer


async def test_checking_records_nothing_in_the_gradebook(check, save, notebooks, course):
    status, _ = await check(save(notebooks["reference"]))
    assert status == 200
    with course.gradebook() as gb:
        assert gb.students == [] and gb.find_assignment(ASSIGNMENT).submissions == []
    assert not any(course.path("submitted").iterdir())
    assert not any(course.path("autograded").iterdir())


def _pool_helpers() -> dict[str, int]:
    """``{"zygote": pid, "oracle": pid}`` among the check workers' descendants."""
    import psutil

    from autograder.labext.service_side import course_lab as service

    found, zygotes = {}, set()
    for worker in list(getattr(service._POOL, "_processes", {}).values()):
        try:
            descendants = psutil.Process(worker.pid).children(recursive=True)
            worker_command = psutil.Process(worker.pid).cmdline()
        except psutil.NoSuchProcess:
            continue
        for process in descendants:
            try:
                command = " ".join(process.cmdline())
            except psutil.Error:
                continue
            if "zygote.py" in command and process.name() != "bwrap":
                if process.ppid() in zygotes:
                    continue  # a kernel the zygote forked (it keeps the zygote's command)
                zygotes.add(process.pid)
                found["zygote"] = process.pid
            elif "autograder.grading.oracle" in command or (
                    process.ppid() == worker.pid and process.cmdline() == worker_command):
                # A fresh helper names its module; a forked one keeps the worker's command.
                found["oracle"] = process.pid
    return found


async def test_opening_the_panel_starts_what_the_first_check_uses(check, save, notebooks,
                                                                  jp_fetch):
    """The Course panel's first request starts the sandbox's fork server and the mistake
    oracle in a check worker, so the first check does not wait for them: that check is
    answered by the very processes started early."""
    from autograder.labext.service_side import course_lab as service
    from autograder.sandbox import forkserver

    # Without a fork server (a grader that cannot mount) kernels start from scratch, and
    # only the oracle can be started early.
    expected = {"zygote", "oracle"} if forkserver.enabled() else {"oracle"}
    service._stop_worker_pool()  # a fresh pool, as when the server starts
    await jp_fetch("autograder", "api", "course")
    for _ in range(600):
        started = _pool_helpers()
        if set(started) == expected:
            break
        await asyncio.sleep(0.2)
    assert set(started) == expected, started
    status, answer = await check(save(notebooks["mutant-no-scale"]))
    assert status == 200, answer
    diagnoses = {e["name"]: e["diagnoses"] for e in answer["exercises"]}
    assert any("1/sqrt(d_k)" in d for d in diagnoses["test_attention_weights"]), diagnoses
    assert _pool_helpers() == started


async def test_open_fetches_one_copy_and_submit_asks_about_unwritten_or_unchecked_work(
        check, save, notebooks, course, jp_fetch, jp_serverapp):
    """The panel's Open fetches the student's copy as nbgrader's Assignment List would
    (its own manager); the course view then points there; before Submit, the extension
    names the answers not written and a checked copy newer than the one to submit."""
    import os
    import shutil

    from nbgrader.server_extensions.assignment_list.handlers import AssignmentList

    manager = AssignmentList(parent=jp_serverapp)
    manager.root_dir = str(course.root)
    jp_serverapp.web_app.settings["assignment_list_manager"] = manager
    fetched = course.root / ASSIGNMENT / "attention.ipynb"

    async def handin() -> list[str]:
        answer = await jp_fetch("autograder", "api", "handin", params={"assignment": ASSIGNMENT})
        return json.loads(answer.body)["warnings"]

    try:
        opened = json.loads((await jp_fetch(
            "autograder", "api", "open", method="POST",
            body=json.dumps({"assignment": ASSIGNMENT}))).body)
        assert opened["path"] == f"{ASSIGNMENT}/attention.ipynb" and opened["fetched"], opened
        assert fetched.is_file()
        here = os.getcwd()
        os.chdir(course.root)  # nbgrader lists fetched copies from the working folder
        try:
            listed = manager.list_released_assignments()["value"]
        finally:
            os.chdir(here)
        assert [a["status"] for a in listed if a["assignment_id"] == ASSIGNMENT] == ["fetched"]
        view = json.loads((await jp_fetch("autograder", "api", "course")).body)
        assert view["assignments"][0]["notebooks"][0]["path"] == opened["path"]
        again = json.loads((await jp_fetch("autograder", "api", "open", method="POST",
                                           body=json.dumps({"assignment": ASSIGNMENT}))).body)
        assert again["path"] == opened["path"]  # fetched once, then the same copy

        (unwritten,) = [w for w in await handin() if "not written yet" in w]
        assert "7 answer(s) not written yet" in unwritten, unwritten
        assert "Exercise 1a" in unwritten, unwritten

        # Work checked in another copy, saved after the fetched one: say so.
        os.utime(fetched, (1e9, 1e9))
        status, _ = await check(save(notebooks["reference"]))
        assert status == 200
        (older,) = [w for w in await handin() if "not written yet" not in w]
        assert "you last checked work/" in older and opened["path"] in older, older
        # The same work in the fetched copy, checked there: nothing to say.
        nbformat.write(notebooks["reference"], fetched)
        status, _ = await check(opened["path"])
        assert status == 200
        assert await handin() == []
    finally:
        shutil.rmtree(course.root / ASSIGNMENT, ignore_errors=True)
        jp_serverapp.web_app.settings.pop("assignment_list_manager", None)
