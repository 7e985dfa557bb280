"""Confine this process (:mod:`autograder.sandbox.inside.confine`), then ``exec`` the kernel.

How a kernel started from scratch gets its limits: the grader runs ::

    python limits_launcher.py '{"limits": {...}, "uid": 61000, "storage": {...}}' -- cmd ...

inside the sandbox (or, without bubblewrap, directly). The JSON says what to apply:
``limits`` (``{"as": bytes, "cpu": s, ...}``), ``uid`` (the slot's uid, or null) and
``storage`` (the arguments of :func:`confine.private_storage`, or null where bubblewrap
already mounted ``/tmp`` and ``/dev/shm``). Like the zygote it imports only the standard
library and :mod:`confine`, which lies next to it.
"""

import json
import os
import sys

import confine


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--":
        sys.exit("usage: limits_launcher.py '{\"limits\": {...}, \"uid\": ...}' -- cmd ...")
    settings, cmd = json.loads(argv[0]), argv[2:]
    if settings.get("storage"):
        confine.private_storage(**settings["storage"])
    if settings.get("workdir"):
        os.chdir(settings["workdir"])
    confine.apply_limits(settings.get("limits", {}), settings.get("uid"))
    confine.drop_privileges(settings.get("uid"))
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
