"""`make test` hands out test files whole and test classes as units of their own
(``--dist loadscope``, see ``tests/conftest.py``); a test class would split its file over
both workers, and its module fixtures would be built twice. (The validations' classes,
one per assignment, are made with ``type()`` on purpose.)"""

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def test_no_test_file_holds_a_test_class():
    found = [f"{path.relative_to(TESTS)}::{node.name}"
             for path in sorted(TESTS.rglob("test_*.py"))
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.ClassDef) and node.name.startswith("Test")]
    assert not found, (f"test classes {found}: under --dist loadscope each is a unit of "
                       "its own; write module-level tests, or put the class in a file of "
                       "its own")
