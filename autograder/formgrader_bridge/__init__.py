"""Old name of :mod:`autograder.workspace.formgrader_bridge`, kept for old workspaces.

A workspace made before the autograder was split into packages names
``autograder.formgrader_bridge.*`` in its ``nbgrader_config.py``
(Autograde.autograde_preprocessors). nbgrader imports it from the workspace's root,
where the workspace's own ``autograder/`` results folder can hide this package's
``__init__`` (and with it the aliases of :mod:`autograder.old_names`) from an editable
install, so this name exists on disk: it works however the package was installed. It is
a folder, not ``formgrader_bridge.py``, so that git follows the old file to its new
place. Importing it gives the module itself.
"""

import sys

from ..workspace import formgrader_bridge

sys.modules[__name__] = formgrader_bridge
