"""Where nbgrader's gradebook lives: a SQLAlchemy database URL.

A workspace keeps its gradebook in SQLite (``<workspace>/gradebook.db``) unless
``autograder init --db-url URL`` names another database. nbgrader talks to the
gradebook only through SQLAlchemy, so any database SQLAlchemy reaches works;
PostgreSQL is the one to use when several graders and formgrader work on one
course at once (SQLite allows a single writer at a time)::

    autograder init --db-url postgresql://grader@db.example.org/transformers_course

``postgresql://`` uses the psycopg (3) driver, installed with this project. Keep
passwords out of the URL: libpq reads ``PGPASSWORD`` or ``~/.pgpass``, so the URL,
which is written into the workspace's ``nbgrader_config.py`` and ``autograder.json``,
need not hold one. The database itself must exist (``createdb NAME``); nbgrader
creates its tables on first use.
"""

from __future__ import annotations

from pathlib import Path

#: Database back ends nbgrader's gradebook runs on (SQLite and PostgreSQL are tested here).
SUPPORTED_BACKENDS = ("sqlite", "postgresql", "mysql", "mariadb")


class GradebookUrlError(ValueError):
    """The URL cannot name a gradebook; the message says why and what to do."""


def sqlite_url(root: Path) -> str:
    """The default: a SQLite file inside the workspace."""
    return f"sqlite:///{Path(root) / 'gradebook.db'}"


def check(url: str) -> str:
    """Validate ``url`` (syntax, back end, installed driver) and return it unchanged."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = make_url(url)
    except ArgumentError:
        raise GradebookUrlError(
            f"--db-url {url!r} is not a database URL; write it as "
            "postgresql://USER@HOST:PORT/DATABASE or sqlite:////absolute/path/gradebook.db"
        ) from None
    backend = parsed.get_backend_name()
    if backend not in SUPPORTED_BACKENDS:
        raise GradebookUrlError(
            f"--db-url: nbgrader's gradebook does not run on '{backend}'; "
            f"use one of {', '.join(SUPPORTED_BACKENDS)}"
        )
    if backend == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise GradebookUrlError(
            "--db-url: an in-memory SQLite database would vanish after every command; "
            "name a file, e.g. sqlite:////srv/course/gradebook.db"
        )
    try:
        parsed.get_dialect().import_dbapi()
    except (ImportError, NoSuchModuleError) as exc:
        raise GradebookUrlError(
            f"--db-url: the database driver for {parsed.drivername!r} is not installed "
            f"({exc}); for PostgreSQL use postgresql:// (psycopg, installed with this project)"
        ) from None
    return url


def redacted(url: str) -> str:
    """The URL with any password replaced by ``***``, for messages and logs."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unreadable database URL>"


def has_password(url: str) -> bool:
    from sqlalchemy.engine import make_url

    return make_url(url).password is not None


def probe(url: str, timeout: float = 10.0) -> None:
    """Connect once, so a wrong host, user, password or database name is reported
    before anything is written, with the server's own explanation."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    postgres = make_url(url).get_backend_name() == "postgresql"
    engine = create_engine(url, connect_args={"connect_timeout": int(timeout)} if postgres else {})
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:
        reason = str(getattr(exc, "orig", exc)).strip().splitlines()
        raise GradebookUrlError(
            f"cannot open the gradebook at {redacted(url)}: {' '.join(reason)[:400]}. "
            "Check that the server runs, the database exists (createdb NAME) and the user "
            "may log in (password from PGPASSWORD or ~/.pgpass)"
        ) from None
    finally:
        engine.dispose()


def protect(url: str, files: list[Path]) -> None:
    """Files that hold a URL with a password are readable by their owner only."""
    if has_password(url):
        for path in files:
            Path(path).chmod(0o600)
