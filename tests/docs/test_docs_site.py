"""The documentation builds as a site, and the README stays a short front door.

`mkdocs build --strict` turns every warning into an error: a link to a page or an anchor
that does not exist, a page of docs/ left out of the nav (mkdocs.yml asks for those
warnings). The README is read on GitHub and PyPI, not on the site, so its links are
checked here. Measurements live in benchmarks/README.md alone (on the site as
docs/benchmarks.md, a link to it): no other page types one of its numbers again.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BENCHMARKS = ROOT / "benchmarks" / "README.md"
#: Longest README a newcomer reads to the end.
README_MAX_LINES = 150

#: A measured quantity: a ratio (1.004x), a duration (9.4 s, 138 s; not a round "2 s",
#: which too many unrelated sentences share), a rate (15,311 tok/s), or a number with
#: decimals or thousands separators (111.2, 842,496). Versions (2.11.0) are not.
MEASUREMENT = re.compile(
    r"(?<![\w.,])(?:\d+(?:,\d{3})+|\d+\.\d+|\d+)(?:x| tok/s)(?![\w.])"
    r"|(?<![\w.,])(?:\d+\.\d+|\d{2,}) s\b"
    r"|(?<![\w.,])(?:\d+(?:,\d{3})+|\d+\.\d+)(?![\w.,]|\.\d)")


def test_the_site_builds_without_a_warning(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout}{run.stderr}"
    assert (tmp_path / "site" / "toolkit" / "index.html").is_file()
    benchmarks = (tmp_path / "site" / "benchmarks" / "index.html").read_text()
    assert "Grading throughput" in benchmarks  # benchmarks/README.md, through the link


def test_every_docs_page_is_in_the_nav():
    # mkdocs warns about omitted pages only for files it sees; name them all here too.
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert pages and all(f": {page}" in nav for page in pages), (pages, nav)
    assert (ROOT / "docs" / "benchmarks.md").resolve() == BENCHMARKS.resolve()


def test_the_readme_is_short_and_gives_the_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    for command in ("make demo", "make test", "make lab"):
        assert command in text, command
    assert "(benchmarks/README.md)" in text  # the numbers are linked, not copied


def test_the_readmes_links_resolve():
    for page in (README, ROOT / "CONTRIBUTING.md"):
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def measurements(text: str) -> set[str]:
    """The measurements a page's prose and tables type in (code is options, not results)."""
    prose = re.sub(r"```.*?```|`[^`\n]*`", " ", text, flags=re.S)
    return {m.group(0) for m in MEASUREMENT.finditer(prose)}


def test_the_measurement_pattern_finds_numbers_not_versions():
    found = measurements("ran at 1.004x, 15,311 tok/s, 9.4 s, 138 s, 111.2 per minute; "
                         "torch 2.11.0+cu130, in about 2 s, 6 GiB, step 500, `--threshold 0.5`")
    assert found == {"1.004x", "15,311 tok/s", "9.4 s", "138 s", "111.2"}


def test_no_measurement_is_typed_in_twice():
    measured = measurements(BENCHMARKS.read_text())
    assert {"10.30x", "0.960x"} <= measured  # the grading and the capstone tables
    pages = [README, ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        if page.resolve() == BENCHMARKS.resolve():
            continue
        again = sorted(measurements(page.read_text()) & measured)
        assert not again, (f"{page.relative_to(ROOT)} repeats measurements of "
                           f"benchmarks/README.md (link to it instead): {again}")
