"""Apply resource limits (and drop root) then ``exec`` the real command.

Run as ``python -m autograder.limits_launcher --as=BYTES --cpu=S --nproc=N
--fsize=BYTES --nofile=N [--uid=UID] -- cmd ...``. It imports nothing from the
project, so it also works inside the sandbox where only this file is visible.
"""

import os
import resource
import sys


def main(argv: list[str]) -> None:
    if "--" not in argv:
        sys.exit(
            "usage: limits_launcher [--as=B --cpu=S --nproc=N --fsize=B --nofile=N --uid=U] -- cmd"
        )
    split = argv.index("--")
    options = dict(a.lstrip("-").split("=", 1) for a in argv[:split])
    cmd = argv[split + 1 :]
    rlimits = {
        "as": resource.RLIMIT_AS,
        "cpu": resource.RLIMIT_CPU,
        "nproc": resource.RLIMIT_NPROC,
        "fsize": resource.RLIMIT_FSIZE,
        "nofile": resource.RLIMIT_NOFILE,
    }
    uid = int(options.pop("uid")) if "uid" in options else None
    for name, value in options.items():
        value = int(value)
        if name == "nproc" and uid is None:
            # Without a uid of our own, the count includes every process of this
            # user: leave room for the ones already running.
            value += _process_count()
        resource.setrlimit(rlimits[name], (value, value))
    if uid is not None and os.geteuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    os.execvp(cmd[0], cmd)


def _process_count() -> int:
    try:
        uid = os.getuid()
        return sum(
            1
            for pid in os.listdir("/proc")
            if pid.isdigit() and os.stat(f"/proc/{pid}").st_uid == uid
        )
    except OSError:
        return 1024


if __name__ == "__main__":
    main(sys.argv[1:])
