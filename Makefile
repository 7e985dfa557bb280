# Everything a user needs, from a fresh clone: `make demo`, `make test`, `make lab`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lab lint validate benchmark clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	@# The sandbox uses bubblewrap where the platform allows; grading still works without it.
	@command -v bwrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get install -y -qq bubblewrap >/dev/null 2>&1 || \
	   (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1)) ; } || \
	  echo "note: bubblewrap not installed; grading will use resource limits only"
	@# System Chromium for the browser test (tests/browser); never `playwright install`.
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get install -y -qq chromium >/dev/null 2>&1 || \
	   (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1)) ; } || \
	  echo "note: chromium not installed; tests/browser will be skipped"
	@# PostgreSQL server binaries for the PostgreSQL gradebook test (it starts its own server).
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null 2>&1 || \
	   (apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null 2>&1)) ; } || \
	  echo "note: postgresql not installed; the PostgreSQL gradebook test will be skipped"
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/autograder demo --dir .demo

test: $(STAMP)
	$(PY) -m ruff check toolkit autograder tests benchmarks
	$(PY) -m pytest -n 2 --dist loadfile -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" -n 2

lab: $(STAMP)
	$(VENV)/bin/autograder init
	$(VENV)/bin/autograder release --all
	@echo "Student notebooks: course-workspace/release/<assignment>/ (instructor sources: source/)"
	$(VENV)/bin/jupyter lab --notebook-dir=course-workspace

lint: $(STAMP)
	$(PY) -m ruff check toolkit autograder tests benchmarks

validate: $(STAMP)
	$(VENV)/bin/autograder validate

benchmark: $(STAMP)
	$(PY) benchmarks/grading.py

clean:
	rm -rf .demo course-workspace .pytest_cache
