"""The half of the server extension that runs in a student's own Jupyter server.

:mod:`.handlers` (the REST endpoints behind the server's authentication) and
:mod:`.shared_server` (on a shared server: send the notebook to ``autograder
serve-checks`` and show its answer). On a shared server this is all of the extension a
student's server holds (the student lab wheel); on a laptop the handlers hand checks to
the service side in the same process.
"""
