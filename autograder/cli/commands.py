"""The ``autograder`` command line: init, release, collect, grade, report, export, feedback,
leaderboard, validate, points, new, demo, serve-checks (the contract is in docs/instructors.md;
scripts and tests use it)."""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path

from ..workspace.assignment_spec import AssignmentSpec
from ..workspace.course import Course, CourseError, available_assignments
from .options import COUNT, FRACTION, SECONDS, WAIT, check_report_options, output_file


def _course(args) -> Course:
    return Course(args.course)


def cmd_init(args) -> int:
    from ..workspace import gradebook_url

    course = _course(args)
    if args.db_url:
        try:
            gradebook_url.probe(gradebook_url.check(args.db_url))
        except gradebook_url.GradebookUrlError as exc:
            raise CourseError(str(exc)) from None
    course.init(db_url=args.db_url, exchange=args.exchange)
    outline = course.outline()
    print(f"Course workspace ready: {course.root}")
    print(f"Course: {outline.title} ({course.outline_file if outline.path else 'no course.toml'})")
    print(f"Gradebook: {gradebook_url.redacted(course.db_url)}; exchange: {course.exchange}")
    print(f"Assignments: {', '.join(available_assignments(course.assignments_dir)) or 'none'}")
    if outline.lectures:
        print(f"Lectures: {len(outline.lectures)} in {course.path('lectures')}")
    print(f"Next: {course.command('release NAME')}")
    return 0


def cmd_release(args) -> int:
    if args.all and args.name:
        raise CourseError(f"release {args.name} or --all, not both: `autograder release "
                          f"{args.name}` releases it whatever its date")
    course = _course(args)
    if not (course.root / "nbgrader_config.py").exists():
        course.init()
    if args.student_toolkit or args.student_lab:
        from ..student.release import release_student_builds

        release_student_builds(course, toolkit=args.student_toolkit, lab=args.student_lab,
                               unlocked=args.unlock or [])
        if not (args.all or args.name):
            return 0
    if not args.all and not args.name:
        raise CourseError("name an assignment, or pass --all, --student-toolkit or "
                          "--student-lab")
    outline = course.outline()
    names = outline.names() if args.all else [args.name]
    if args.all:
        unlisted = set(available_assignments(course.assignments_dir)) - set(names)
        if unlisted:
            print(f"Not in {course.outline_file} (add a line to release them with --all): "
                  f"{', '.join(sorted(unlisted))}")
    now = datetime.datetime.now().astimezone()
    released = []
    for name in names:
        entry = outline.assignment(name)
        if args.all and entry and not entry.released_by(now):
            print(f"Not yet: {name} is released on {entry.release} "
                  f"(`{course.command(f'release {name}')}` releases it now)")
            continue
        edited = course.edited_release(name)
        if edited and not args.force:
            print(f"Kept {course.path('release', name)}: {', '.join(edited)} holds answers "
                  f"written since release (`{course.command(f'release {name} --force')}` "
                  "replaces it)")
            continue
        print(f"Released {name}: {course.release(name, exchange=not args.no_exchange)}")
        released.append(name)
    course.build_lectures()
    if released and not args.no_exchange:
        print(f"Students can fetch {'them' if len(released) > 1 else 'it'} from the exchange "
              f"({course.exchange}); afterwards: {course.command('collect NAME')}")
    return 0


def cmd_collect(args) -> int:
    course = _course(args)
    students = course.collect(args.name)
    print(f"Collected {args.name}: {len(students)} submission(s) in {course.path('submitted')}")
    print(f"Next: {course.command(f'grade {args.name}')}")
    return 0


def _local_pool_likely(args, course: Course) -> bool:
    """Whether ``grade`` will most likely grade in a local pool (see
    :func:`~autograder.grading.workers.local_workers`), counting as jobs the submissions
    without results yet (all of them with ``--force``)."""
    from ..grading.workers import local_workers

    if args.scheduler:
        return False
    students = args.student or course.students_with_submissions(args.name)
    results = course.results_dir(args.name)
    todo = [s for s in students if args.force or not (results / f"{s}.json").is_file()]
    return bool(todo) and local_workers(args.workers, len(todo)) > 1


def cmd_grade(args) -> int:
    course = _course(args)
    if _local_pool_likely(args, course):
        from ..grading.workers import start_fork_server

        start_fork_server()  # its imports run while ours do
    from ..grading.grade import grade

    result = grade(
        course,
        args.name,
        students=args.student,
        workers=args.workers,
        scheduler=args.scheduler,
        force=args.force,
        progress=not args.quiet,
        cell_timeout=args.cell_timeout,
    )
    print(
        f"Graded {len(result['graded'])}, already graded {len(result['skipped'])} "
        f"(use --force to grade again). Isolation: {result['isolation']}"
    )
    print(f"Next: {course.command(f'report {args.name}')}")
    return 0


def cmd_report(args) -> int:
    from ..reports import report

    course = _course(args)
    check_report_options(args, course.command)
    args.plot, args.html = output_file(args.plot), output_file(args.html)

    if args.similarity:
        from ..reports import similarity_report

        return similarity_report.main(course, args)
    if args.checks:
        from ..reports import check_my_work_progress

        return check_my_work_progress.main(course, args)
    return report.main(course, args)


def cmd_export(args) -> int:
    from ..reports import export

    args.output = output_file(args.output)

    return export.main(_course(args), args)


def cmd_roster(args) -> int:
    from ..workspace.roster import import_roster

    added, updated = import_roster(_course(args), args.file)
    print(f"Roster {args.file}: {added} student(s) added, {updated} updated in the gradebook")
    return 0


def cmd_feedback(args) -> int:
    course = _course(args)
    course.require_released(args.name)
    if not args.force:
        from ..workspace.visibility_calendar import feedback_hold

        hold = feedback_hold(course.outline().assignment(args.name))
        if hold:
            raise CourseError(f"{hold}; `{course.command(f'feedback {args.name} --force')}` "
                              "releases it now")
    if not any(course.path("autograded").glob(f"*/{args.name}")):
        raise CourseError(f"no graded submission of {args.name} yet: run "
                          f"`{course.command(f'grade {args.name}')}` first")
    result = course.nbgrader_api().generate_feedback(args.name, force=True)
    if not result.get("success"):
        raise CourseError(
            f"nbgrader generate_feedback failed:\n{result.get('error') or result.get('log')}"
        )
    print(f"Feedback written under {course.path('feedback')}")
    if args.no_release:
        print(f"Not released: `{course.command(f'feedback {args.name}')}` without "
              "--no-release hands it to the students")
        return 0
    students = course.release_feedback(args.name)
    print(f"Feedback released to the exchange ({course.exchange}) for {len(students)} "
          f"student(s): each gets it with \"Fetch Feedback\" in the Assignment List, or "
          f"`nbgrader fetch_feedback {args.name}`")
    return 0


def cmd_leaderboard(args) -> int:
    from ..reports import leaderboard

    return leaderboard.main(_course(args), args)


def cmd_validate(args) -> int:
    from ..authoring.validate import validate

    names = [args.name] if args.name else available_assignments(Course().assignments_dir)
    ok = validate(names, workers=args.workers)
    print("\nvalidate: all expectations hold" if ok else "\nvalidate: SOME EXPECTATIONS FAILED")
    return 0 if ok else 1


def cmd_points(args) -> int:
    names = available_assignments(Course().assignments_dir)
    total_automatic = total_written = 0.0
    print(f"{'assignment':<28} {'automatic':>9} {'written':>8} {'total':>6}")
    for name in names:
        automatic, written = AssignmentSpec.load(name).points()
        total_automatic, total_written = total_automatic + automatic, total_written + written
        print(f"{name:<28} {automatic:>9g} {written:>8g} {automatic + written:>6g}")
    total = total_automatic + total_written
    share = total_written / total if total else 0.0
    print(f"{'course':<28} {total_automatic:>9g} {total_written:>8g} {total:>6g}")
    print(f"written share: {total_written:g} of {total:g} points = {share:.1%}")
    if args.min_written_share is not None and share < args.min_written_share:
        print(f"autograder: the written share is below {args.min_written_share:.0%}",
              file=sys.stderr)
        return 1
    return 0


def cmd_new(args) -> int:
    from ..authoring.scaffold import new_assignment, next_steps

    files = new_assignment(args.name, title=args.title, notebook=args.notebook)
    print(next_steps(args.name, files))
    return 0


def cmd_demo(args) -> int:
    from ..authoring.demo import demo

    root = demo(args.dir, assignments=args.assignment, workers=args.workers)
    print(f"\nDemo finished. Workspace and reports: {root}")
    return 0


def cmd_serve_checks(args) -> int:
    from ..labext.service_side.serve_checks import serve

    try:
        serve(_course(args).root, socket_path=args.socket, listen=args.listen,
              hub_api=args.hub_api or os.environ.get("JUPYTERHUB_API_URL"),
              workers=args.workers, cooldown_seconds=args.cooldown)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the usual way a service stops
        print("\nautograder: the check service stopped", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autograder",
        description="Release, grade and report the course's assignments: every submission runs "
        "in a sandboxed kernel and is scored by hidden checks in this process; nbgrader keeps "
        "the gradebook.",
        epilog="A grading day: autograder roster class.csv (once a term); autograder collect "
        "NAME; autograder grade NAME --workers N; autograder report NAME; autograder feedback "
        "NAME. "
        "'autograder COMMAND --help' explains each command.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name, func, help_text):
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(func=func)
        if name not in ("validate", "demo", "new", "points"):
            p.add_argument("--course", type=Path, default=None,
                           help="course workspace (default: course-workspace/ in the checkout)")
        return p

    p = add("init", cmd_init, "create a course workspace wired to assignments/")
    p.add_argument(
        "--db-url",
        default=None,
        help="gradebook database as a SQLAlchemy URL, e.g. postgresql://grader@host/course "
        "(default: SQLite in the workspace; a workspace keeps the URL it was given)",
    )
    p.add_argument("--exchange", type=Path, default=None,
                   help="nbgrader's exchange, where students fetch and submit (default: "
                        "exchange/ in the workspace; outside it when the workspace is private)")
    p = add("release", cmd_release, "student versions of assignments, published to the exchange")
    p.add_argument("name", nargs="?", help="the assignment folder name, e.g. 01-attention")
    p.add_argument("--all", action="store_true",
                   help="every assignment of course/course.toml whose release date has come")
    p.add_argument("--force", action="store_true",
                   help="release again even over answers written in release/")
    p.add_argument("--no-exchange", action="store_true",
                   help="only write release/; do not publish to nbgrader's exchange")
    p.add_argument("--student-toolkit", action="store_true",
                   help="build the wheel students install: the toolkit with the exercises of "
                        "every locked assignment as stubs (written to <course>/student-toolkit/)")
    p.add_argument("--student-lab", action="store_true",
                   help="build the Course panel for students' servers on a shared machine, "
                        "checks sent to serve-checks (written to <course>/student-lab/)")
    p.add_argument("--unlock", action="append", metavar="NAME",
                   help="with --student-toolkit: include this assignment's solutions "
                        "(after its deadline; repeatable)")
    p = add("roster", cmd_roster, "students' names, emails and LMS ids from a CSV into the "
            "gradebook (formgrader and export show them)")
    p.add_argument("file", type=Path, help="CSV with a header row: id (the nbgrader student "
                   "id) and any of first_name, last_name, email, lms_user_id")
    p = add("collect", cmd_collect, "copy what students submitted via the exchange to submitted/")
    p.add_argument("name", help="the assignment to collect")
    p = add("grade", cmd_grade, "grade submissions (sandboxed kernels, hidden checks)")
    p.add_argument("name", help="the assignment to grade")
    p.add_argument("--student", action="append", help="only this student (repeatable)")
    p.add_argument("--workers", type=COUNT, default=None, help="parallel kernels (default: cores)")
    p.add_argument("--scheduler", default=None, help="Dask scheduler address, e.g. tcp://host:8786")
    p.add_argument("--force", action="store_true", help="grade again submissions already graded")
    p.add_argument("--cell-timeout", type=SECONDS, default=None, help="override seconds per cell")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p = add("report", cmd_report, "scores, diagnosed mistakes and item analysis")
    p.add_argument("name", help="the assignment to report on")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table",
                   help="table (default, for reading), csv (spreadsheets) or json (scripts)")
    p.add_argument("--plot", type=Path, default=None, help="write a PNG plot here")
    p.add_argument("--checks", action="store_true", help="each student's latest Check my "
                   "work instead of grades: who checked, their score, what fails")
    p.add_argument("--similarity", action="store_true",
                   help="list pairs of near-copies (and copies of the reference) instead of scores")
    p.add_argument("--threshold", type=FRACTION, default=None, help="similarity flag (default 0.6)")
    p.add_argument("--min-tokens", type=COUNT, default=None, help="shortest exercise compared")
    p.add_argument("--html", type=Path, default=None, help="similarity page (default: reports/)")
    p = add("export", cmd_export, "grades per student and exercise: CSV, Canvas CSV or JSON")
    p.add_argument("name")
    p.add_argument("--format", choices=["csv", "canvas", "json"], default="csv")
    p.add_argument("--output", type=Path, default=None, help="write here instead of stdout")
    p.add_argument("--canvas-column", default=None,
                   help='Canvas grade column, e.g. "Attention (1234)"')
    p.add_argument("--canvas-key", choices=["sis_login_id", "sis_user_id", "id"],
                   default="sis_login_id",
                   help="Canvas column that holds the nbgrader student id (default: SIS Login ID)")
    p = add("feedback", cmd_feedback, "HTML feedback for every graded student (nbgrader), "
            "released to the exchange for the students to fetch")
    p.add_argument("name", help="the assignment to write feedback for")
    p.add_argument("--no-release", action="store_true",
                   help="write the feedback only; students fetch nothing until it is released")
    p.add_argument("--force", action="store_true", help="release it even while course.toml "
                   "still hides check details from students (visibility_after_due)")
    p = add("leaderboard", cmd_leaderboard, "rank the checkpoints handed in on a held-out "
            "text (assignments with [leaderboard]), retrain the top ones to check them")
    p.add_argument("name", help="the assignment, e.g. 07-capstone")
    p.add_argument("--reproduce", type=COUNT, default=0, metavar="N",
                   help="retrain the top N from the configuration and seed each handed in "
                        "(sandboxed) and flag those that miss their checkpoint's loss")
    p.add_argument("--names", action="store_true",
                   help="show student ids instead of the pseudonyms students chose")
    p.add_argument("--ungraded", action="store_true",
                   help="rank submissions not graded yet too")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("--html", type=Path, default=None,
                   help="the page with the plot (default: reports/NAME-leaderboard.html)")
    p = add("validate", cmd_validate,
            "on a throwaway course: reference full marks, stub and constant answers zero, "
            "every named mutant caught")
    p.add_argument("name", nargs="?", help="one assignment (default: all of them)")
    p.add_argument("--workers", type=COUNT, default=None, help="parallel kernels (default: cores)")
    p = add("points", cmd_points, "each assignment's points, automatic and written (read by "
            "a person), and the written share of the course")
    p.add_argument("--min-written-share", type=FRACTION, default=None,
                   help="exit 1 when written answers are a smaller share of all points")
    p = add("new", cmd_new, "a new assignment from the minimal example, ready to validate")
    p.add_argument("name", help="folder name, e.g. 05-blocks (in assignments/, or in "
                   "AUTOGRADER_ASSIGNMENTS)")
    p.add_argument("--title", default=None, help="the assignment's title (default: from NAME)")
    p.add_argument("--notebook", default=None, help="notebook name (default: from NAME)")
    p = add("demo", cmd_demo, "the whole loop end to end on a throwaway course")
    p.add_argument("--dir", default=None, help="where to put the demo course (default: a temp dir)")
    p.add_argument("--assignment", action="append", help="only this assignment (repeatable)")
    p.add_argument("--workers", type=COUNT, default=2, help="parallel kernels (default: 2)")
    p = add("serve-checks", cmd_serve_checks, '"Check my work" on a shared server: check the '
            "notebooks students' Jupyter servers send here, as this user")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--socket", type=Path, help="a Unix socket, e.g. /run/autograder/"
                       "check.sock, for students who are Unix users of this machine "
                       "(their servers: c.CheckService.socket)")
    where.add_argument("--listen", metavar="HOST:PORT", help="HTTP, for students in "
                       "containers, named by their hub tokens (their servers: "
                       "c.CheckService.url)")
    p.add_argument("--hub-api", metavar="URL", help="with --listen: the hub's API, e.g. "
                   "http://hub:8081/hub/api (default: $JUPYTERHUB_API_URL)")
    p.add_argument("--workers", type=COUNT, default=1, help="checks at once (default: 1)")
    p.add_argument("--cooldown", type=WAIT, default=10.0,
                   help="seconds a student waits between two checks that run (default: 10)")
    return parser


def main(argv: list[str] | None = None) -> int:
    from ..grading.workers import Terminated, stop_on_termination

    args = build_parser().parse_args(argv)
    try:
        with stop_on_termination():
            return args.func(args)
    except CourseError as exc:
        print(f"autograder: {exc}", file=sys.stderr)
        return 2
    except Terminated as exc:
        print(
            f"\nautograder: stopped by {exc}; run the same command again to finish the rest",
            file=sys.stderr,
        )
        return 128 + exc.signum
    except KeyboardInterrupt:
        print(
            "\nautograder: interrupted; run the same command again to finish the rest",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
