"""Every cross-reference in the package's docstrings names something that exists (issue 31, item 5).

A ``:mod:``, ``:func:``, ``:class:`` or ``:meth:`` reference is resolved as Sphinx's Python domain
resolves it: ``~`` and a trailing ``()`` dropped; a name is looked up from the module that writes it,
then from each package above it, then as an absolute import; a name with leading dots is also found
as the suffix of any object in the package (``.Target.kernel_blocker``, ``..flops.estimate_flops``).
A module renamed or a function moved leaves such a reference dead, and a reader following it finds
nothing.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from collections.abc import Iterator
from types import ModuleType

import onnx_precision

ROLES = ("mod", "func", "class", "meth")
_REFERENCE = re.compile(rf":({'|'.join(ROLES)}):`([^`]+)`")


def _modules() -> dict[str, ModuleType]:
    found = {onnx_precision.__name__: onnx_precision}
    for info in pkgutil.walk_packages(onnx_precision.__path__, onnx_precision.__name__ + "."):
        if info.name.endswith("__main__"):
            continue
        found[info.name] = importlib.import_module(info.name)
    return found


def _docstrings(module: ModuleType) -> Iterator[tuple[str, str, str]]:
    """(where, the dotted scope it is written in, text) of each docstring of ``module`` and of the
    classes, functions, methods and properties it defines: the scope of a class's or a method's
    docstring is its class (``ModelContext``), where an unqualified name is looked up first. Read from
    the objects, not the source: parsing every file would take seconds."""
    name = module.__name__
    if module.__doc__:
        yield name, name, module.__doc__
    for attr, obj in vars(module).items():
        if getattr(obj, "__module__", None) != name:
            continue  # imported
        if isinstance(obj, type):
            scope = f"{name}.{attr}"
            if obj.__doc__:
                yield scope, scope, obj.__doc__
            for member, value in vars(obj).items():
                value = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
                if callable(value) and getattr(value, "__module__", None) == name and value.__doc__:
                    yield f"{scope}.{member}", scope, value.__doc__
        elif callable(obj) and obj.__doc__:
            yield f"{name}.{attr}", name, obj.__doc__


@functools.cache
def _named(name: str) -> object | None:
    """What the dotted ``name`` imports as, or is an attribute chain of; None where it names nothing."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if isinstance(obj, type) and isinstance(vars(obj).get(attr), property):
                obj = vars(obj)[attr]  # a property of the class, not its value
                continue
            if not hasattr(obj, attr):
                return None
            obj = getattr(obj, attr)
        return obj
    return None


def _fits(role: str, obj: object) -> bool:
    """Whether ``obj`` is what ``role`` names: a module, a class, or a function or method (a
    property or another callable included)."""
    if role == "mod":
        return isinstance(obj, ModuleType)
    if role == "class":
        return isinstance(obj, type)
    return not isinstance(obj, (ModuleType, type)) and (callable(obj) or isinstance(obj, property))


Index = dict[str, list[tuple[str, object]]]


def _suffix_index(modules: dict[str, ModuleType]) -> Index:
    """Every module of the package and the classes and functions each defines, with their methods
    and properties, by their last dotted part."""
    names: Index = {}

    def add(name: str, obj: object) -> None:
        names.setdefault(name.rpartition(".")[2], []).append((name, obj))

    for module_name, module in modules.items():
        add(module_name, module)
        for attr, obj in vars(module).items():
            if getattr(obj, "__module__", None) == module_name:
                add(f"{module_name}.{attr}", obj)
                for member, value in (vars(obj).items() if isinstance(obj, type) else ()):
                    add(f"{module_name}.{attr}.{member}", value)
    return names


def resolves(role: str, target: str, scope: str, index: Index) -> bool:
    """Whether the ``role`` reference ``target``, written in ``scope`` (a module, or a class in one),
    names an object of its kind."""
    target = target.lstrip("~").removesuffix("()")
    name = target.lstrip(".")
    if not name:
        return False
    scopes = scope.split(".")
    # from the scope it is written in outwards, then absolute (onnx.helper.make_node)
    for candidate in [".".join([*scopes[:cut], name]) for cut in range(len(scopes), 0, -1)] + [name]:
        obj = _named(candidate)
        if obj is not None and _fits(role, obj):
            return True
    return target.startswith(".") and any((n == name or n.endswith("." + name)) and _fits(role, obj)
                                          for n, obj in index.get(name.rpartition(".")[2], ()))


def dead_references() -> list[str]:
    modules = _modules()
    index: Index | None = None
    dead = []
    for _, module in sorted(modules.items()):
        for where, scope, doc in _docstrings(module):
            for match in _REFERENCE.finditer(doc):
                role, target = match.groups()
                if resolves(role, target, scope, {}):
                    continue
                index = _suffix_index(modules) if index is None else index  # only for what is left
                if not resolves(role, target, scope, index):
                    dead.append(f"{where}: {match.group(0)}")
    return dead


def test_every_docstring_reference_resolves():
    assert dead_references() == []


def test_a_dead_reference_is_found():
    index = _suffix_index({"onnx_precision.flops": importlib.import_module("onnx_precision.flops")})
    assert resolves("func", "..flops.estimate_flops", "onnx_precision.quantized", index)
    assert resolves("func", "~onnx_precision.policy.resolve", "onnx_precision.rewriter", index)
    assert resolves("func", "estimate_flops", "onnx_precision.flops", index)
    assert resolves("meth", "low", "onnx_precision.flops.FlopShares", index)
    assert resolves("class", ".FlopShares", "onnx_precision.convert.run", index)
    assert not resolves("func", "..flops.estimate_flop", "onnx_precision.quantized", index)
    # the four issue 31 found: a module that was never there, a function named as a module
    assert not resolves("mod", "onnx_precision.oracle.qdq_spelling", "onnx_precision.target.base", index)
    assert not resolves("mod", "onnx_precision.policy.resolve", "onnx_precision.typing_rules", index)
