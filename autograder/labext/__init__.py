"""The course inside JupyterLab: a Course panel and "Check my work".

Two halves, installed together with this package:

* the **server extension** (this package): REST endpoints under ``/autograder/api/``
  that list the course and check a saved notebook through the grading pipeline;
  enabled on install by ``jupyter-config/autograder-labext.json``, which pip places in
  ``<env>/etc/jupyter/jupyter_server_config.d/``;
* the **frontend extension** (``frontend/``, TypeScript): the Course panel and the
  "Check my work" button, built by ``make`` into ``labextension/`` and linked into
  ``<env>/share/jupyter/labextensions/transformers-course-lab``.
"""

from __future__ import annotations

LABEXTENSION_NAME = "transformers-course-lab"


class CheckRefused(Exception):
    """A request the service will not run; ``status`` is the HTTP status to answer,
    ``retry_after`` (seconds, when known) how soon asking again can succeed."""

    def __init__(self, status: int, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after

    def body(self) -> dict:
        """The JSON answer: ``{"message", "retry_after"?}`` (the panel says when to retry)."""
        body: dict = {"message": str(self)}
        if self.retry_after is not None:
            body["retry_after"] = max(1, round(self.retry_after))
        return body


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": LABEXTENSION_NAME}]


def _jupyter_server_extension_points():
    return [{"module": "autograder.labext"}]


def _load_jupyter_server_extension(serverapp):
    from .handlers import setup_handlers

    serverapp.log.info("autograder.labext: %s", setup_handlers(serverapp).describe())

