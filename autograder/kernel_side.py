"""The kernel-side half of the check protocol.

This file is never imported by the grader: its *source* is executed inside the
student's kernel after the notebook has run. It defines one object,
``__autograder__`` in the user namespace (see :func:`make_bridge`), whose
``handle(request_path)`` reads a JSON request and a
safetensors file of inputs written by the trusted checker, evaluates the
student's function or class, and writes the result back as JSON + safetensors.

Nothing here is trusted: a student can replace any of it. The trusted process
therefore validates everything it reads back (types, dtypes, shapes, sizes) and
does every comparison itself.
"""

import json
import linecache
import sys
import traceback
import types


class _AutograderBridge:
    MAX_MESSAGE = 4000

    def __init__(self, namespace):
        self.ns = namespace
        self._sites_cache = {}  # forbid list -> (len(sys.modules), sites, labels)
        self.site_scans = 0  # how often the modules were walked (a test reads it)

    # -- shortcuts a check forbids -------------------------------------------
    # A forbidden name stands for an *object*, wherever it is reachable: the toolkit
    # re-exports its functions from packages (``toolkit.position.apply_rope`` is
    # ``toolkit.position.rope.apply_rope``) and modules import each other's, so every
    # module-level reference to the object in the loaded modules of its top-level package
    # is replaced, and so is every name in the student's namespace bound to it. Finding
    # them means walking those modules (all of torch for a torch name), so the places are
    # worked out once per forbid list and reused until another module is imported. In the
    # course's own package a module may also keep the object in a table (a dict of the
    # functions a widget draws with) or as a function's keyword default (``mask_fn=
    # mask_tokens``); those entries are replaced too. Third-party packages' tables are left
    # alone: they may be the library's own dispatch, in use while the check runs.
    _OWN_PACKAGE = "toolkit"

    def _resolve(self, dotted):
        """``(owner, attribute, object)`` for a dotted name among loaded modules, or Nones."""
        module_name, _, attr = dotted.rpartition(".")
        while module_name:
            module = sys.modules.get(module_name)
            if module is not None:
                owner = module
                *path, attr = dotted[len(module_name) + 1 :].split(".")
                for part in path:  # nested attribute, e.g. torch.nn.MultiheadAttention.forward
                    owner = getattr(owner, part, None)
                    if owner is None:
                        return None, None, None
                obj = getattr(owner, attr, None)
                return (owner, attr, obj) if obj is not None else (None, None, None)
            module_name, _, _ = module_name.rpartition(".")
        return None, None, None

    def _targets(self, name):
        """``[(owner, attribute, object)]``: what the forbidden ``name`` stands for."""
        owner, attr, obj = self._resolve(name)
        module = obj if owner is not None else sys.modules.get(name)
        if isinstance(module, types.ModuleType):
            # A whole module or package: every public callable it defines itself (not
            # what it merely imports, such as torch.Tensor).
            depth = name.count(".") + 1
            return [
                (module, key, value)
                for key, value in list(vars(module).items())
                if callable(value)
                and not key.startswith("_")
                and (getattr(value, "__module__", None) or "").split(".")[:depth]
                == name.split(".")
            ]
        return [] if owner is None else [(owner, attr, obj)]

    def _forbidden_sites(self, forbidden):
        """``([(owner, attribute, original, label)], {id(original): label})``, cached."""
        key = tuple(forbidden)
        cached = self._sites_cache.get(key)
        if cached is not None and cached[0] == len(sys.modules):
            return cached[1], cached[2]
        self.site_scans += 1
        sites, labels, by_package = [], {}, {}
        for name in forbidden:
            for owner, attr, obj in self._targets(name):
                labels.setdefault(id(obj), name)  # listed twice: reported as first listed
                sites.append((owner, attr, obj, labels[id(obj)]))
                by_package.setdefault(name.split(".")[0], {})[id(obj)] = obj
        for package, objects in by_package.items():
            prefix = package + "."
            for module_name, module in list(sys.modules.items()):
                if module_name != package and not module_name.startswith(prefix):
                    continue
                namespace = getattr(module, "__dict__", None)
                if not isinstance(namespace, dict):
                    continue
                for attr, value in list(namespace.items()):
                    obj = objects.get(id(value))
                    if obj is not None and obj is value:
                        sites.append((module, attr, obj, labels[id(obj)]))
                    elif package == self._OWN_PACKAGE:
                        sites += self._held_in(value, objects, labels)
        # One swap per place, even when a place was found twice (the name's own attribute).
        unique = {}
        for site in sites:
            unique.setdefault((id(site[0]), site[1]), site)
        sites = list(unique.values())
        self._sites_cache[key] = (len(sys.modules), sites, labels)
        return sites, labels

    @staticmethod
    def _held_in(value, objects, labels):
        """``[(table, key, object, label)]`` for each forbidden object that ``value`` (a
        module-level dict, or a function with keyword defaults) holds."""
        if isinstance(value, dict):
            table = value
        elif isinstance(value, types.FunctionType) and value.__kwdefaults__:
            table = value.__kwdefaults__
        else:
            return []
        return [(table, key, item, labels[id(item)]) for key, item in list(table.items())
                if item is not None and objects.get(id(item)) is item]

    def _guard(self, forbidden, violations, callers=None):
        """Replace forbidden callables by tripwires; return the undo list. A tripwire adds
        the name to ``violations`` and the student's function that called it (or "") to
        ``callers``."""
        undo = []
        if not forbidden:
            return undo

        def tripwire(name, original):
            def _blocked(*args, **kwargs):
                violations.append(name)
                if callers is not None:
                    callers.append(_student_caller(sys._getframe(1)))
                raise RuntimeError(f"{name} is not allowed in this exercise: implement it yourself")

            _blocked.__wrapped_original__ = original
            return _blocked

        sites, labels = self._forbidden_sites(forbidden)
        blocked = {}
        for owner, attr, original, name in sites:
            current = owner.get(attr) if isinstance(owner, dict) else getattr(owner, attr, None)
            if current is original:
                new = blocked.setdefault(id(original), tripwire(name, original))
                self._swap(owner, attr, original, new, undo)
        # Names the student bound to a forbidden object (``from m import f as g``).
        for key, value in list(self.ns.items()):
            name = labels.get(id(value))
            if name is not None and key != "__autograder__":
                new = blocked.setdefault(id(value), tripwire(name, value))
                undo.append((self.ns, key, value, new))
                self.ns[key] = new
        return undo

    @staticmethod
    def _swap(owner, attr, original, new, undo):
        try:
            if isinstance(owner, dict):  # a table's entry, or a keyword default
                owner[attr] = new
            else:
                setattr(owner, attr, new)
            undo.append((owner, attr, original, new))
        except (AttributeError, TypeError):
            pass

    @staticmethod
    def _unguard(undo):
        for owner, attr, original, _ in reversed(undo):
            if isinstance(owner, dict):
                owner[attr] = original
            else:
                try:
                    setattr(owner, attr, original)
                except (AttributeError, TypeError):
                    pass

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

    def respond(self, request, tensors):
        """``(reply, result tensors)`` for a decoded request, with no files involved.

        The grader also uses this, in a trusted process and on instructor code only, to
        replay a check's requests against the named mistakes (autograder.diagnosis).
        """
        violations, callers = [], []
        reply = {"ok": True, "violations": violations, "called_from": callers}
        result_tensors = {}
        undo = self._guard(request.get("forbid", []), violations, callers)
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
            self._unguard(undo)
        return reply, result_tensors

    def _lookup(self, name):
        if name not in self.ns:
            raise NameError(
                f"'{name}' is not defined: run the cell that defines it and keep its name"
            )
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


def _is_student_code(frame) -> bool:
    """A frame of the notebook's own cells (they run in ``__main__``), not of the checks'
    code, this bridge or a library (torch, the course toolkit)."""
    return (frame.f_globals.get("__name__") == "__main__"
            and not frame.f_code.co_filename.startswith("<autograder"))


def _student_caller(frame) -> str:
    """The qualified name of the first function up the stack that the student wrote, or ""
    from a cell's top level: where to look for a forbidden call."""
    while frame is not None:
        code = frame.f_code
        if _is_student_code(frame):
            qualname = getattr(code, "co_qualname", code.co_name)
            return "" if qualname == "<module>" else qualname
        frame = frame.f_back
    return ""


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
