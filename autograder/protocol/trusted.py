"""The trusted half of the check protocol: ask the student's kernel to evaluate, read back data.

A hidden check never imports or executes student code. It calls, e.g.::

    out = submission.call("scaled_dot_product_attention", q, k, v, mask=mask)

which writes the inputs to a safetensors file and a JSON request into the
submission's private working directory, asks the kernel's bridge to answer it (one
``autograder_request`` shell message, which ``__autograder__.handle(request)`` answers; see
:mod:`autograder.protocol.kernel_side`) and reads the reply back. Only JSON and
safetensors cross the boundary (never pickle), both are size-capped and validated here,
and all comparisons happen in this process.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import stat
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save_file

from ..limits import Limits

MAX_REPLY_JSON = 1 * 2**20
MAX_REPLY_TENSORS = 64 * 2**20
MAX_ITEMS = 256
MAX_DEPTH = 4
_FILE_FIELDS = ("tensors", "reply", "reply_tensors")


class SubmissionError(Exception):
    """The student's code raised, returned something unusable, or the kernel failed."""


class ForbiddenShortcut(SubmissionError):
    """The student's code called a function the exercise asks them to write themselves."""


@dataclasses.dataclass
class Exchange:
    """One request a check sent to the kernel and what came back, kept for the diagnosis.

    ``request`` is the JSON request without its file paths and ``tensors`` its inputs, as
    the kernel received them; ``outcome`` is the decoded result or the SubmissionError.
    """

    request: dict
    tensors: dict[str, torch.Tensor]
    outcome: Any


class Submission:
    """What a hidden check sees of a submission: a way to evaluate its names on our inputs."""

    def __init__(
        self, session, nb, exchange_dir: Path, forbid: tuple[str, ...] = (),
        call_timeout: float = Limits.call_timeout,
    ):
        self._session = session
        self._nb = nb
        self._dir = Path(exchange_dir)
        self._dir.mkdir(parents=True, exist_ok=True)
        session.hand_over(self._dir)
        self._counter = itertools.count()
        self.default_forbid = tuple(forbid)
        self.call_timeout = call_timeout
        #: When a list, every request and its outcome is appended (see :class:`Exchange`).
        self.transcript: list[Exchange] | None = None

    # -- the public API used by checks -------------------------------------------
    def call(self, name: str, *args, forbid=None, seed=None, timeout=None, **kwargs) -> Any:
        """Call the student's function ``name(*args, **kwargs)``; returns tensors/scalars."""
        return self._request(
            "call", name=name, args=args, kwargs=kwargs, forbid=forbid, seed=seed, timeout=timeout
        )

    def module(
        self,
        name: str,
        *args,
        init=None,
        state=None,
        method="forward",
        forbid=None,
        seed=0,
        timeout=None,
        **kwargs,
    ) -> Any:
        """Instantiate the student's class ``name(**init)``, load ``state`` (a state_dict we
        made) if given, and return ``getattr(module, method)(*args, **kwargs)`` under no_grad."""
        return self._request(
            "module",
            name=name,
            args=args,
            kwargs=kwargs,
            init=init or {},
            state=state,
            method=method,
            forbid=forbid,
            seed=seed,
            timeout=timeout,
        )

    def module_state(self, name: str, init=None, seed=0) -> dict[str, torch.Tensor]:
        """The freshly initialised state_dict of the student's class ``name(**init)``."""
        return self._request("module", name=name, init=init or {}, method="__state__", seed=seed)

    def run(self, code: str, forbid=None, timeout=None, seed=None, **inputs) -> Any:
        """Run checker-written ``code`` in the student's namespace with ``inputs`` bound;
        the value of ``result`` comes back. For checks that need more than one call."""
        return self._request(
            "exec",
            code=code,
            args=tuple(inputs.values()),
            arg_names=list(inputs),
            forbid=forbid,
            timeout=timeout,
            seed=seed,
        )

    # -- transport ------------------------------------------------------------------
    def _request(
        self,
        kind,
        *,
        args=(),
        kwargs=None,
        forbid=None,
        timeout=None,
        state=None,
        init=None,
        **fields,
    ) -> Any:
        # First: a kernel that crashed, hangs or filled its storage is restarted here,
        # on empty storage, before this request's files are written into it.
        if not self._session.ensure_alive(self._nb):
            raise SubmissionError("the kernel is not running (it crashed or was stopped earlier)")
        n = next(self._counter)
        tensors: dict[str, torch.Tensor] = {}
        request = {"kind": kind, **fields}
        request["args"] = [_encode(a, tensors, f"a{i}") for i, a in enumerate(args)]
        request["kwargs"] = {k: _encode(v, tensors, f"k_{k}") for k, v in (kwargs or {}).items()}
        if init is not None:
            request["init"] = {k: _encode(v, tensors, f"i_{k}") for k, v in init.items()}
        if state is not None:
            for key, value in state.items():
                tensors[f"state.{key}"] = value.detach().contiguous()
            request["load_state"] = True
        request["forbid"] = list(self.default_forbid if forbid is None else forbid)
        paths = {
            s: self._dir / f"{n}-{s}"
            for s in ("request.json", "in.safetensors", "reply.json", "reply.safetensors")
        }
        if tensors:
            save_file(tensors, paths["in.safetensors"])
            request["tensors"] = str(paths["in.safetensors"])
        request["reply"] = str(paths["reply.json"])
        request["reply_tensors"] = str(paths["reply.safetensors"])
        paths["request.json"].write_text(json.dumps(request))
        for p in paths.values():
            if p.exists():
                self._session.hand_over(p)
        exchange = None
        if self.transcript is not None:
            plain = {k: v for k, v in request.items() if k not in _FILE_FIELDS}
            exchange = Exchange(plain, dict(tensors), None)
            self.transcript.append(exchange)
        try:
            result = self._answer(paths, timeout or self.call_timeout)
        except SubmissionError as exc:
            if exchange is not None:
                exchange.outcome = exc
            raise
        if exchange is not None:
            exchange.outcome = result
        return result

    def _answer(self, paths: dict[str, Path], timeout: float) -> Any:
        self._run_in_kernel(str(paths["request.json"]), timeout)
        reply = _read_json(paths["reply.json"])
        shortcut = forbidden_shortcut(reply)
        if shortcut is not None:
            raise shortcut
        if reply.get("ok") is not True:
            raise SubmissionError(str(reply.get("error", "the kernel sent back no result"))[:4000])
        blob = _read_bytes(paths["reply.safetensors"], MAX_REPLY_TENSORS, missing_ok=True)
        result_tensors = load_safetensors(blob) if blob else {}
        for p in paths.values():
            p.unlink(missing_ok=True)
        return decode_reply(reply, result_tensors)

    def _run_in_kernel(self, request_path: str, timeout: float) -> None:
        """Have the kernel's bridge answer the request written at ``request_path``."""
        try:
            # _request has just called ensure_alive.
            content = self._session.request(request_path, timeout=timeout)
        except TimeoutError:
            raise SubmissionError(f"no answer within {timeout:g}s (an infinite loop?)") from None
        except Exception as exc:  # DeadKernelError and transport failures
            raise SubmissionError(f"the kernel stopped while running your code ({exc})") from None
        if content.get("status") != "ok":
            raise SubmissionError(
                f"the check could not run in your kernel: {content.get('ename')}: "
                f"{content.get('evalue')}"[:2000]
            )


def _encode(value, tensors, key):
    if isinstance(value, torch.Tensor):
        # safetensors refuses two entries sharing memory (the same tensor passed twice).
        shared = any(t.untyped_storage().data_ptr() == value.untyped_storage().data_ptr()
                     for t in tensors.values())
        tensors[key] = value.detach().clone() if shared else value.detach().contiguous()
        return {"type": "tensor", "key": key}
    if isinstance(value, bool):
        return {"type": "bool", "value": value}
    if isinstance(value, (int, float, str)) or value is None:
        return {"type": type(value).__name__.replace("NoneType", "none"), "value": value}
    if isinstance(value, (tuple, list)):
        return {
            "type": "tuple" if isinstance(value, tuple) else "list",
            "items": [_encode(v, tensors, f"{key}.{i}") for i, v in enumerate(value)],
        }
    if isinstance(value, dict):
        return {
            "type": "dict",
            "items": {k: _encode(v, tensors, f"{key}.{k}") for k, v in value.items()},
        }
    raise TypeError(f"cannot send {type(value).__name__} to the kernel")


def forbidden_shortcut(reply: dict) -> ForbiddenShortcut | None:
    """The first forbidden call a reply reports, said for the student: what was called and
    from which of their functions (a LayerNorm that calls F.layer_norm breaks every later
    exercise that uses it; the name says where to look)."""
    violations = reply.get("violations")
    if not isinstance(violations, list) or not violations:
        return None
    callers = reply.get("called_from")
    caller = callers[0] if isinstance(callers, list) and callers else ""
    where = f" (in `{str(caller)[:80]}`)" if caller else ""
    return ForbiddenShortcut(f"your code called {str(violations[0])[:200]}{where}, which this "
                             "exercise asks you to implement yourself")


def _read_bytes(path: Path, limit: int, missing_ok=False) -> bytes | None:
    """Read a file the kernel wrote: a regular file (no symlink tricks) under ``limit`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise SubmissionError(
            "your kernel sent back no reply (was the check protocol altered?)"
        ) from None
    except OSError as exc:
        raise SubmissionError(f"unreadable reply from the kernel ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise SubmissionError("the kernel's reply is not a regular file")
        if info.st_size > limit:
            raise SubmissionError(
                f"your result is too large ({info.st_size / 2**20:.1f} MiB, "
                f"limit {limit / 2**20:.0f} MiB)"
            )
        return f.read(limit + 1)


def _read_json(path: Path) -> dict:
    raw = _read_bytes(path, MAX_REPLY_JSON)
    try:
        reply = json.loads(raw)
    except ValueError:
        raise SubmissionError("the kernel's reply is not valid JSON") from None
    if not isinstance(reply, dict):
        raise SubmissionError("the kernel's reply has the wrong structure")
    return reply


def decode_reply(reply: dict, tensors: dict[str, torch.Tensor]) -> Any:
    """The value an ``ok`` reply carries, validated (see :func:`_decode`)."""
    return _decode(reply.get("result"), tensors, 0)


def _decode(spec, tensors, depth) -> Any:
    """Rebuild a value from the reply tree, refusing anything unexpected."""
    if not isinstance(spec, dict) or depth > MAX_DEPTH:
        raise SubmissionError("the kernel's reply has the wrong structure")
    kind = spec.get("type")
    if kind == "tensor":
        key = spec.get("key")
        if key not in tensors:
            raise SubmissionError("the kernel's reply refers to a missing tensor")
        return tensors[key]
    if kind in ("list", "tuple"):
        items = spec.get("items")
        if not isinstance(items, list) or len(items) > MAX_ITEMS:
            raise SubmissionError("the kernel's reply has too many items")
        return tuple(_decode(v, tensors, depth + 1) for v in items)
    if kind == "dict":
        items = spec.get("items")
        if not isinstance(items, dict) or len(items) > MAX_ITEMS:
            raise SubmissionError("the kernel's reply has too many items")
        return {str(k): _decode(v, tensors, depth + 1) for k, v in items.items()}
    expected = {"bool": bool, "int": int, "float": (int, float), "str": str}
    if kind == "none":
        return None
    if kind in expected and isinstance(spec.get("value"), expected[kind]):
        return spec["value"]
    raise SubmissionError(f"the kernel's reply has an unknown value type {kind!r}")
