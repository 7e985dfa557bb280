"""The kernel side of a check's ``forbid`` list: shortcuts switched off while it runs.

Like :mod:`autograder.protocol.kernel_side`, whose bridge uses it, this file's *source* is executed
inside the student's kernel (:func:`autograder.protocol.kernel_side.kernel_source`), so it imports
the standard library only. Nothing here is trusted either: it is a tripwire for a
shortcut taken in good faith, and a student can switch it off in their own kernel.
"""

import sys
import types


class ForbidGuard:
    """Replaces forbidden callables by tripwires while a check calls the student's code.

    A forbidden name stands for an *object*, wherever it is reachable: the toolkit
    re-exports its functions from packages (``toolkit.position.apply_rope`` is
    ``toolkit.position.rope.apply_rope``) and modules import each other's, so every
    module-level reference to the object in the loaded modules of its top-level package
    is replaced, and so is every name in the student's namespace bound to it. Finding
    them means walking those modules (all of torch for a torch name), so the places are
    worked out once per forbid list and reused until another module is imported. In the
    course's own package a module may also keep the object in a table (a dict of the
    functions a widget draws with), as a function's default (``mask_fn=mask_tokens``) or
    in a function's closure; those places are replaced too. Third-party packages' tables
    are left alone: they may be the library's own dispatch, in use while the check runs.
    """

    _OWN_PACKAGE = "toolkit"

    def __init__(self, namespace):
        self.ns = namespace
        self._sites_cache = {}  # forbid list -> (len(sys.modules), sites, labels)
        self.site_scans = 0  # how often the modules were walked

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
        module-level dict, or a function's defaults and closure) holds."""
        if isinstance(value, dict):
            tables = [value]
        elif isinstance(value, types.FunctionType):
            tables = [table for table in (value.__kwdefaults__, _Defaults(value),
                                          _Closure(value)) if table]
        else:
            return []
        return [(table, key, item, labels[id(item)]) for table in tables
                for key, item in list(table.items())
                if item is not None and objects.get(id(item)) is item]

    def guard(self, forbidden, violations, callers=None):
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
            if self._get(owner, attr) is original:
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
    def _get(owner, attr):
        """What a module's attribute, a table's entry, a default or a closure's cell holds."""
        return owner.get(attr) if isinstance(owner, _TABLES) else getattr(owner, attr, None)

    @staticmethod
    def _put(owner, attr, value) -> bool:
        """Set a module's attribute, or a table's entry, a default or a closure's cell;
        False where the owner refuses."""
        try:
            if isinstance(owner, _TABLES):
                owner[attr] = value
            else:
                setattr(owner, attr, value)
            return True
        except (AttributeError, TypeError):
            return False

    def _swap(self, owner, attr, original, new, undo):
        if self._put(owner, attr, new):
            undo.append((owner, attr, original, new))

    def unguard(self, undo):
        for owner, attr, original, _ in reversed(undo):
            self._put(owner, attr, original)


class _Defaults:
    """A function's positional defaults as a table (position -> value) that can be set:
    ``masking_example(sentence, mask_fn=mask_tokens)`` keeps ``mask_tokens`` there."""

    def __init__(self, function):
        self.function = function

    def __bool__(self):
        return bool(self.function.__defaults__)

    def items(self):
        return enumerate(self.function.__defaults__ or ())

    def get(self, position):
        return self.function.__defaults__[position]

    def __setitem__(self, position, value):
        values = list(self.function.__defaults__)
        values[position] = value
        self.function.__defaults__ = tuple(values)


class _Closure:
    """The cells of a function's closure as a table (position -> contents) that can be
    set: a function made by a factory keeps what the factory was given there."""

    def __init__(self, function):
        self.cells = function.__closure__ or ()

    def __bool__(self):
        return bool(self.cells)

    def items(self):
        for position, cell in enumerate(self.cells):
            try:
                yield position, cell.cell_contents
            except ValueError:  # a cell not filled yet
                continue

    def get(self, position):
        return dict(self.items()).get(position)

    def __setitem__(self, position, value):
        self.cells[position].cell_contents = value


#: Owners whose places are entries (``owner[key]``), not attributes.
_TABLES = (dict, _Defaults, _Closure)


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
