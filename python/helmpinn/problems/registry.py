"""Problems by name: the registry behind :func:`get_problem`, :func:`list_problems` and
``helmpinn train --problem``.

The registry is explicit: it is built from the ``PROBLEMS`` tables of :mod:`helmpinn.problems.builtin`,
:mod:`helmpinn.problems.scattering`, :mod:`helmpinn.problems.obstacles`, :mod:`helmpinn.problems.waves`
and :mod:`helmpinn.problems.waves3d` (name -> ``(factory, one-line description)``), and
:func:`register_problem` adds to it. A factory is ``f(**options) -> Problem``; its options are
its keyword parameters with their defaults (:func:`problem_options`).

A user's own factory needs no registration: a name of the form ``"path/to/file.py:make"`` (a
Python file and the factory's name in it) or ``"package.module:make"`` (an importable module)
loads ``make`` and calls it, in :func:`get_problem` and ``helmpinn train --problem``, with the
options its signature declares. The problem's name is then the spec with the file's absolute
path, so that a run resumed from another directory finds the same file.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import os
import sys
from typing import Any, Callable

from . import builtin, obstacles, scattering, waves, waves3d
from .problem import Problem

__all__ = ["get_problem", "list_problems", "problem_names", "problem_options", "register_problem",
           "load_factory", "canonical_name", "recorded_options"]

#: name -> (factory, one-line description): the built-in tables, then what register_problem adds.
_REGISTRY: dict[str, tuple[Callable[..., Problem], str]] = {
    **builtin.PROBLEMS,
    **scattering.PROBLEMS,
    **obstacles.PROBLEMS,
    **waves.PROBLEMS,
    **waves3d.PROBLEMS,
}


def register_problem(name: str, description: str):
    """Decorator: register a factory ``f(**options) -> Problem`` under ``name`` (a name with a
    ``":"`` is taken for a ``file.py:factory`` spec and refused)."""
    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"register_problem: name must be a non-empty string without ':', got {name!r}")

    def deco(factory):
        if not callable(factory):
            raise TypeError(f"register_problem({name!r}): the factory must be callable")
        _REGISTRY[name] = (factory, description)
        return factory
    return deco


def problem_names() -> list[str]:
    """The registered names."""
    return list(_REGISTRY)


def list_problems() -> list[tuple[str, str]]:
    """(name, one-line description) of every registered problem."""
    return [(name, desc) for name, (_, desc) in _REGISTRY.items()]


def _is_spec(name: str) -> bool:
    return isinstance(name, str) and ":" in name and name not in _REGISTRY


def _names_a_file(where: str) -> bool:
    """Whether the part before the ``:`` of a user spec is a file's path (else a module)."""
    return where.endswith(".py") or os.sep in where or "/" in where


def canonical_name(spec: str) -> str:
    """The name :func:`get_problem` gives the problem ``spec`` names, found without importing
    or calling anything: a registered name as it is, ``path/to/file.py:make`` with the file's
    absolute path, ``package.module:make`` as it is. Raises ValueError for a name that is none
    of these. (``helmpinn train --resume`` compares the name a run folder records with the one
    the command line gives before anything is loaded.)"""
    if not isinstance(spec, str):
        raise TypeError(f"problem name must be a string, got {type(spec).__name__}")
    if spec in _REGISTRY:
        return spec
    where, colon, attr = spec.rpartition(":")
    if not colon or not where or not attr.isidentifier():
        raise ValueError(f"problem {spec!r}: neither a registered name nor path/to/file.py:factory "
                         f"or package.module:factory")
    if _names_a_file(where):
        return f"{os.path.abspath(os.path.expanduser(where))}:{attr}"
    return spec


_LOADED: dict[tuple[str, int], Any] = {}  # (absolute path, mtime_ns) -> module


def _load_file(path: str, spec: str):
    full = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(full):
        what = "is not a file" if os.path.exists(full) else "does not exist"
        raise ValueError(f"problem {spec!r}: {full} {what} (expected path/to/file.py:factory)")
    key = (full, os.stat(full).st_mtime_ns)
    if key not in _LOADED:
        mod_name = f"_helmpinn_user_problem_{abs(hash(full)):x}"
        file_spec = importlib.util.spec_from_file_location(mod_name, full)
        if file_spec is None or file_spec.loader is None:
            raise ValueError(f"problem {spec!r}: {full} cannot be loaded as a Python file")
        module = importlib.util.module_from_spec(file_spec)
        sys.modules[mod_name] = module  # dataclasses and pickling look modules up there
        # The file's folder first on the import path while it runs, as `python file.py` has it:
        # a module beside the file imports from any working directory.
        folder = os.path.dirname(full)
        sys.path.insert(0, folder)
        try:
            file_spec.loader.exec_module(module)
        except ModuleNotFoundError as exc:
            sys.modules.pop(mod_name, None)
            raise ValueError(f"problem {spec!r}: {full} imports {exc.name!r}, which is neither installed nor "
                             f"a module beside the file in {folder}") from exc
        except BaseException:
            sys.modules.pop(mod_name, None)
            raise
        finally:
            sys.path.remove(folder)   # the entry inserted above (the first equal one)
        _LOADED[key] = module
    return _LOADED[key], full


def load_factory(spec: str) -> tuple[Callable[..., Problem], str, str]:
    """``(factory, canonical name, description)`` for a registered name or a user spec
    ``"path/to/file.py:factory"`` / ``"package.module:factory"``.

    Raises ValueError for an unknown name, a missing file or module (also a module the file
    imports, which is looked for beside the file too), or a missing attribute; TypeError when
    the attribute is not callable. Other errors raised by the user's module itself while it is
    imported propagate unchanged.
    """
    if not isinstance(spec, str):
        raise TypeError(f"problem name must be a string, got {type(spec).__name__}")
    if spec in _REGISTRY:
        factory, desc = _REGISTRY[spec]
        return factory, spec, desc
    if ":" not in spec:
        raise ValueError(f"unknown problem {spec!r}; known: {', '.join(_REGISTRY)} (or a factory "
                         f"of your own as path/to/file.py:make or package.module:make)")
    where, _, attr = spec.rpartition(":")
    if not where or not attr.isidentifier():
        raise ValueError(f"problem {spec!r}: expected path/to/file.py:factory or "
                         f"package.module:factory (factory a Python name)")
    if _names_a_file(where):
        module, full = _load_file(where, spec)
        canonical = f"{full}:{attr}"
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as exc:
            if exc.name is not None and where.startswith(exc.name):
                raise ValueError(f"problem {spec!r}: no module named {exc.name!r} (for a file, "
                                 f"give its path ending in .py)") from None
            raise
        canonical = spec
    if not hasattr(module, attr):
        raise ValueError(f"problem {spec!r}: {where} has no attribute {attr!r}")
    factory = getattr(module, attr)
    if not callable(factory):
        raise TypeError(f"problem {spec!r}: {attr} is a {type(factory).__name__}, expected a "
                        f"factory (a callable returning a helmpinn.Problem)")
    doc = inspect.getdoc(factory) or ""
    desc = doc.strip().splitlines()[0] if doc.strip() else f"user problem {canonical}"
    return factory, canonical, desc


def _options(factory: Callable, spec: str) -> dict[str, Any]:
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {p.name: (None if p.default is inspect.Parameter.empty else p.default) for p in params
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def problem_options(name: str) -> dict[str, Any]:
    """The options a problem accepts (its factory's keyword parameters) with their defaults
    (None for a parameter without one, which must then be given)."""
    factory, canonical, _ = load_factory(name)
    return _options(factory, canonical)


def _json_exact(value: Any) -> bool:
    """Whether JSON writes ``value`` and reads it back as the same value: None, a bool, an int,
    a finite float, a string, and lists / tuples / string-keyed dicts of these (a tuple reads
    back as a list)."""
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_json_exact(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_exact(v) for k, v in value.items())
    return False


def recorded_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``(recorded, by_repr)``: the options a run's files record to rebuild the problem with
    (:func:`get_problem` ``(name, **recorded)``: those JSON reads back as they are) and the
    others by ``repr`` (a function, an array, a complex default of a user's factory: left out
    of ``recorded``, so that the factory's default holds again when the problem is rebuilt; a
    checkpoint's fingerprint of the problem tells when it then differs). Checked when a run
    starts, so that no such option fails a write at its end."""
    recorded = {k: v for k, v in options.items() if _json_exact(v)}
    return recorded, {k: repr(v) for k, v in options.items() if k not in recorded}


def get_problem(name: str, **options) -> Problem:
    """The problem ``name`` (registered, or a user's ``file.py:factory`` /
    ``package.module:factory``) built with ``options`` (see :func:`problem_options`)."""
    factory, canonical, desc = load_factory(name)
    params = inspect.signature(factory).parameters.values()
    accepted = _options(factory, canonical)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"problem {name!r} takes no option {', '.join(unknown)}; "
                         f"it takes {', '.join(accepted) or 'none'}")
    missing = [p.name for p in params if p.name in accepted and p.default is inspect.Parameter.empty
               and p.name not in options]
    if missing:
        raise ValueError(f"problem {name!r} needs option {', '.join(missing)} (no default)")
    problem = factory(**options)
    if not isinstance(problem, Problem):
        raise TypeError(f"problem {name!r}: the factory returned {type(problem).__name__}, "
                        f"expected a helmpinn.Problem")
    problem.name = canonical
    problem.description = desc
    problem.options = {**accepted, **options}
    return problem
