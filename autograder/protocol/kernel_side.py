"""The kernel-side half of the check protocol.

This file is never imported by the grader: its *source* is executed inside the
student's kernel after the notebook has run. It defines one object,
``__autograder__`` in the user namespace (see :func:`make_bridge`), whose
``handle(request_path)`` reads a JSON request and a
safetensors file of inputs written by the trusted checker, evaluates the
student's function or class, and writes the result back as JSON + safetensors.

Nothing here is trusted: a student can replace any of it. The trusted process
therefore validates everything it reads back (types, dtypes, shapes, sizes) and
does every comparison itself. The guard behind a check's ``forbid`` list lives in
:mod:`autograder.protocol.kernel_guard`; :func:`kernel_source` is both files' source, as the
kernel receives it.
"""

import json
import linecache
import traceback
from pathlib import Path

try:  # imported as a module: the grader's mistake oracle, the tests
    from .kernel_guard import ForbidGuard, _is_student_code
except ImportError:  # executed from source in the kernel, after kernel_guard's source
    pass

#: What a check that asks for a name the notebook lacks tells the student (Check my work
#: keeps the name in front of it: ``labext.feedback``).
UNDEFINED_ADVICE = ("run the cell that defines it and keep its name (if that cell raised an "
                    "error, the notes on your notebook say where)")


class _AutograderBridge:
    MAX_MESSAGE = 4000

    def __init__(self, namespace):
        self.ns = namespace
        self.forbid = ForbidGuard(namespace)

    @property
    def site_scans(self):
        """How often the guard walked the loaded modules (a test reads it)."""
        return self.forbid.site_scans

    # -- values <-> files ----------------------------------------------------
    def _encode(self, value, tensors, depth=0):
        import torch

        if depth > 4:
            raise _WrongAnswerType("your function returned values nested more than 4 deep")
        if isinstance(value, torch.Tensor):
            key = f"t{len(tensors)}"
            value = value.detach().to("cpu").contiguous()
            # safetensors refuses two entries that share memory: an answer that returns
            # its input twice, or a view of another answer, is sent as copies.
            storage = value.untyped_storage().data_ptr()
            if any(t.untyped_storage().data_ptr() == storage for t in tensors.values()):
                value = value.clone()
            tensors[key] = value
            return {"type": "tensor", "key": key}
        if type(value).__module__ == "numpy" and hasattr(value, "shape"):
            if value.shape == ():  # a number: np.int64(512)
                return self._encode(value.item(), tensors, depth)
            # Converting it would pass this check and break the next exercise that calls it.
            raise _WrongAnswerType(
                f"your function returned a numpy.{type(value).__name__}: return a torch.Tensor "
                "(keep the computation in torch; torch.from_numpy converts an array)")
        if isinstance(value, bool):
            return {"type": "bool", "value": value}
        if isinstance(value, int):
            return {"type": "int", "value": value}
        if isinstance(value, float):
            return {"type": "float", "value": value}
        if isinstance(value, str):
            return {"type": "str", "value": value[:10000]}
        if value is None:
            return {"type": "none"}
        if isinstance(value, (tuple, list)):
            return {"type": "list", "items": [self._encode(v, tensors, depth + 1) for v in value]}
        if isinstance(value, dict):
            return {
                "type": "dict",
                "items": {str(k): self._encode(v, tensors, depth + 1) for k, v in value.items()},
            }
        raise _WrongAnswerType(
            f"your function returned a {type(value).__name__}, which the checks cannot read: "
            "return a tensor, a number, or a tuple, list or dict of them")

    def _decode(self, spec, tensors):
        kind = spec["type"]
        if kind == "tensor":
            return tensors[spec["key"]]
        if kind == "list":
            return [self._decode(v, tensors) for v in spec["items"]]
        if kind == "tuple":
            return tuple(self._decode(v, tensors) for v in spec["items"])
        if kind == "dict":
            return {k: self._decode(v, tensors) for k, v in spec["items"].items()}
        return spec.get("value")

    # -- requests --------------------------------------------------------------
    def handle(self, request_path):
        """Answer the request in ``request_path``: inputs from its safetensors file, the
        reply written to the JSON and safetensors files the request names."""
        from safetensors.torch import load_file, save_file

        with open(request_path) as f:
            request = json.load(f)
        tensors = load_file(request["tensors"]) if request.get("tensors") else {}
        reply, result_tensors = self.respond(request, tensors)
        if result_tensors:
            save_file(result_tensors, request["reply_tensors"])
        with open(request["reply"], "w") as f:
            json.dump(reply, f)

    def listen(self, kernel, message_type):
        """Answer the grader's ``message_type`` shell messages (content ``{"request":
        path}``) with :meth:`handle`, replying ``{"status": "ok"}`` or the error: cheaper
        than running ``__autograder__.handle(path)`` as a cell (nothing to transform,
        compile and run, no pause before the reply; ``benchmarks/check_requests.py``
        measures both). ``kernel`` is the running ipykernel; its dispatcher calls the
        handler with SIGINT turned into KeyboardInterrupt, as it runs code."""

        def on_request(stream, idents, parent):
            try:
                self.handle(parent["content"]["request"])
                content = {"status": "ok"}
            except BaseException as exc:  # an interrupt included: the grader waits for a reply
                try:
                    detail = str(exc)[: self.MAX_MESSAGE]
                except BaseException:  # an exception whose message itself raises
                    detail = "(its message could not be read)"
                content = {"status": "error", "ename": type(exc).__name__, "evalue": detail}
            reply_type = message_type.removesuffix("_request") + "_reply"  # Jupyter's naming
            kernel.session.send(stream, reply_type, content, parent, idents)

        kernel.shell_handlers[message_type] = on_request

    def respond(self, request, tensors):
        """``(reply, result tensors)`` for a decoded request, with no files involved.

        The grader also uses this, in a trusted process and on instructor code only, to
        replay a check's requests against the named mistakes (autograder.grading.diagnosis).
        """
        violations, callers = [], []
        reply = {"ok": True, "violations": violations, "called_from": callers}
        result_tensors = {}
        undo = self.forbid.guard(request.get("forbid", []), violations, callers)
        try:
            args = [self._decode(a, tensors) for a in request.get("args", [])]
            kwargs = {k: self._decode(v, tensors) for k, v in request.get("kwargs", {}).items()}
            result = self._run(request, args, kwargs, tensors)
            reply["result"] = self._encode(result, result_tensors)
        except BaseException as exc:  # noqa: B036 - a student's SystemExit is a result too
            # An answer the checks cannot read: the answer, not the code, is the problem.
            error = str(exc) if isinstance(exc, _WrongAnswerType) else self._describe(exc)
            reply.update(ok=False, error=error[: self.MAX_MESSAGE])
            result_tensors = {}
        finally:
            self.forbid.unguard(undo)
        return reply, result_tensors

    def _lookup(self, name):
        if name not in self.ns:
            raise NameError(f"'{name}' is not defined: {UNDEFINED_ADVICE}")
        return self.ns[name]

    def _run(self, request, args, kwargs, tensors):
        import torch

        kind = request["kind"]
        if request.get("seed") is not None:
            torch.manual_seed(request["seed"])
        if kind == "call":
            return self._lookup(request["name"])(*args, **kwargs)
        if kind == "module":
            cls = self._lookup(request["name"])
            init = {k: self._decode(v, tensors) for k, v in request.get("init", {}).items()}
            module = cls(**init)
            state = {k[len("state.") :]: v for k, v in tensors.items() if k.startswith("state.")}
            if request.get("load_state", False):
                load_exercise_state(module, state)
            if request.get("method") == "__state__":
                return {k: v for k, v in module.state_dict().items()}
            module.eval()
            with torch.no_grad():
                return getattr(module, request.get("method") or "forward")(*args, **kwargs)
        if kind == "exec":
            scope = dict(self.ns)
            scope["inputs"] = dict(zip(request.get("arg_names", []), args))
            scope["_load_exercise_state"] = load_exercise_state  # for the checks' code
            exec(compile(request["code"], "<autograder check>", "exec"), scope)
            return scope.get("result")
        raise ValueError(f"unknown request kind {kind!r}")

    def _describe(self, exc):
        """``Kind: message (in `function`, line N: the line)`` at the last line of the
        notebook's code the error went through: the function says which exercise to open."""
        where, frames = "", list(traceback.walk_tb(exc.__traceback__))
        student = [(frame, line) for frame, line in frames if _is_student_code(frame)]
        if student:
            frame, lineno = student[-1]
            code = frame.f_code
            name = getattr(code, "co_qualname", code.co_name)
            text = linecache.getline(code.co_filename, lineno, frame.f_globals).strip()
            place = f"line {lineno}" if name == "<module>" else f"in `{name}`, line {lineno}"
            where = f" ({place}: {text})" if text else f" ({place})"
        elif any(frame.f_code.co_filename == "<autograder check>" for frame, _ in frames):
            where = " (raised by the check's code, on what your function returned)"
        message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return (message + where)[: self.MAX_MESSAGE]


class _WrongAnswerType(Exception):
    """An answer of a kind the checks cannot read (the code ran; its result is the issue)."""


def load_exercise_state(module, state, may_miss=()) -> None:
    """Load a check's weights into the student's ``module`` (``strict=False``), or raise a
    KeyError that says from the module's side what differs. ``may_miss``: names the module
    need not have (a tied output layer)."""
    missing, unexpected = module.load_state_dict(state, strict=False)
    missing = [name for name in missing if name not in may_miss]
    problems = []
    if unexpected:  # the check has them, the module not: often a tensor that is no Parameter
        problems.append(f"it has no parameter or buffer named {sorted(unexpected)} (a tensor "
                        "kept as a plain attribute is neither: wrap it in nn.Parameter)")
    if missing:
        problems.append(f"it has {sorted(missing)}, which the exercise does not name (keep "
                        "the names the exercise gives)")
    if problems:
        raise KeyError(f"{type(module).__name__}'s parameters differ from the exercise's: "
                       + "; ".join(problems))


def make_bridge(namespace):
    """Called by the install snippet with the kernel's user namespace."""
    return _AutograderBridge(namespace)


def kernel_source() -> str:
    """What the kernel executes to define the bridge: the guard's source, then this file's
    (standard library only; the kernel cannot import the autograder)."""
    here = Path(__file__).resolve().parent
    return "\n\n".join((here / name).read_text() for name in ("kernel_guard.py", "kernel_side.py"))
