# Everything a user needs, from a fresh clone: `make demo`, `make test`, `make lab`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# The JupyterLab extension (autograder/labext): TypeScript sources, built by jlpm into
# labextension/ and linked into the venv; rebuilt only when the sources change.
LABEXT_SRC_DIR := autograder/labext/frontend
LABEXT_SOURCES := $(addprefix $(LABEXT_SRC_DIR)/,package.json yarn.lock .yarnrc.yml tsconfig.json) \
                  $(wildcard $(LABEXT_SRC_DIR)/src/*.ts $(LABEXT_SRC_DIR)/style/*)
LABEXT_BUILD   := autograder/labext/labextension/package.json
LABEXT         := $(VENV)/.labextension

.PHONY: demo test test-retrain test-fast lab lint validate benchmark docs clean labextension

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
	@# Node.js builds the JupyterLab extension (the course panel).
	@command -v node >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get install -y -qq nodejs >/dev/null 2>&1 || \
	   (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq nodejs >/dev/null 2>&1)) ; } || \
	  echo "note: node not installed; the JupyterLab extension cannot be built"
	@$(MAKE) --no-print-directory labextension
	@# PostgreSQL server binaries for the PostgreSQL gradebook test (it starts its own server).
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null 2>&1 || \
	   (apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null 2>&1)) ; } || \
	  echo "note: postgresql not installed; the PostgreSQL gradebook test will be skipped"
	@touch $(STAMP)

labextension: $(LABEXT)

$(LABEXT_BUILD): $(LABEXT_SOURCES)
	@command -v node >/dev/null 2>&1 || { echo "node is missing: install Node.js 18+ (apt-get install nodejs)"; exit 1; }
	cd $(LABEXT_SRC_DIR) && PATH="$(abspath $(VENV))/bin:$$PATH" jlpm install --immutable --mode=skip-build >/dev/null
	cd $(LABEXT_SRC_DIR) && PATH="$(abspath $(VENV))/bin:$$PATH" jlpm build >/dev/null
	@touch $(LABEXT_BUILD)

# Installed as `pip install` of a wheel would: the built bundle under share/jupyter and
# the server extension's switch under etc/jupyter (an editable install copies neither).
# JupyterLab's defaults for this environment (overrides.json): no "get notified about
# Jupyter news?" prompt and no update check in a course's lab.
$(LABEXT): $(LABEXT_BUILD) autograder/labext/jupyter-config/overrides.json
	@mkdir -p $(VENV)/share/jupyter/labextensions $(VENV)/etc/jupyter/jupyter_server_config.d \
	  $(VENV)/share/jupyter/lab/settings
	ln -sfn "$(abspath autograder/labext/labextension)" $(VENV)/share/jupyter/labextensions/transformers-course-lab
	cp autograder/labext/jupyter-config/autograder-labext.json $(VENV)/etc/jupyter/jupyter_server_config.d/
	cp autograder/labext/jupyter-config/overrides.json $(VENV)/share/jupyter/lab/settings/
	@touch $(LABEXT)

demo: $(STAMP)
	$(VENV)/bin/autograder demo --dir .demo

test: $(STAMP) $(LABEXT)
	$(PY) -m ruff check toolkit autograder tests benchmarks
	$(PY) -m pytest -n 2 --dist loadscope --no-loadscope-reorder -q --durations=20

# The same suite with every checkpoint trained afresh (a cache of the run's own), as on a
# new machine; `make test` reuses the checkpoints whose training code has not changed.
test-retrain: $(STAMP) $(LABEXT)
	AUTOGRADER_TEST_RETRAIN=1 $(MAKE) --no-print-directory test

test-fast: $(STAMP) $(LABEXT)
	$(PY) -m pytest -q -m "not slow" -n 2

# Two labs: `make lab` is the instructor's (the workspace: sources, gradebook, formgrader);
# `make lab LAB=student` a student's (course-student/: lectures and the assignments the
# student fetches, submits and gets feedback for; no sources, gradebook or other students).
LAB ?= instructor
# Jupyter refuses to start as root unless told to; in a container root is the usual user.
LAB_FLAGS := $(if $(filter 0,$(shell id -u)),--allow-root)
lab: $(STAMP) $(LABEXT)
	$(VENV)/bin/autograder init
	$(VENV)/bin/autograder release --all
ifeq ($(LAB),student)
	$(PY) -m autograder.student.lab_wheel course-student
	@echo "The student's lab: course-student/ (the Course panel's Open fetches each assignment)"
	cd course-student && JUPYTER_CONFIG_PATH="$(CURDIR)/course-student/.lab$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
	  "$(CURDIR)/$(VENV)/bin/jupyter" lab $(LAB_FLAGS)
else
	@echo "Student notebooks: course-workspace/release/<assignment>/, lectures: course-workspace/lectures/"
	@# Rooted in the workspace, where nbgrader finds nbgrader_config.py: formgrader, the
	@# assignment list and the exchange all work from there.
	cd course-workspace && "$(CURDIR)/$(VENV)/bin/jupyter" lab $(LAB_FLAGS)
endif

lint: $(STAMP)
	$(PY) -m ruff check toolkit autograder tests benchmarks

validate: $(STAMP)
	$(VENV)/bin/autograder validate

benchmark: $(STAMP)
	$(PY) benchmarks/grading.py

# The documentation site (mkdocs.yml, pages in docs/) into site/; warnings are errors.
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

# What the commands made here; the venv stays. The checkpoints 05 and 07 prepare for
# grading are cached per user (30 days unused), shared by every checkout: cleared too.
clean:
	rm -rf .demo course-workspace .pytest_cache site
	rm -rf "$${XDG_CACHE_HOME:-$$HOME/.cache}/autograder/checkpoints"
