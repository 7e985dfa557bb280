"""The course inside JupyterLab: a Course panel and "Check my work".

Two halves, installed together with this package:

* the **server extension** (this package): REST endpoints under ``/autograder/api/``
  that list the course and check a saved notebook through the grading pipeline;
  enabled on install by ``jupyter-config/autograder-labext.json``, which pip places in
  ``<env>/etc/jupyter/jupyter_server_config.d/``. Its two sides: :mod:`.student_side`
  (what a student's own server runs: the endpoints, or on a shared server the client of
  the check service) and :mod:`.service_side` (what holds the course and runs checks);
  :mod:`.handin` is what passes between them;
* the **frontend extension** (``frontend/``, TypeScript): the Course panel and the
  "Check my work" button, built by ``make`` into ``labextension/`` and linked into
  ``<env>/share/jupyter/labextensions/transformers-course-lab``.
"""

from __future__ import annotations

LABEXTENSION_NAME = "transformers-course-lab"


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": LABEXTENSION_NAME}]


def _jupyter_server_extension_points():
    return [{"module": "autograder.labext"}]


def _load_jupyter_server_extension(serverapp):
    from .student_side.handlers import setup_handlers

    serverapp.log.info("autograder.labext: %s", setup_handlers(serverapp).describe())

