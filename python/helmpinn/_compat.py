"""Old names that keep working for a while, with a DeprecationWarning: renamed arguments, and
the modules that moved into the subpackages (``helmpinn.problems``, ``helmpinn.models``,
``helmpinn.training``, ``helmpinn.optim``, ``helmpinn.cli``): a user's problem file written as
``from helmpinn.geometry import Box`` still loads."""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Any

UNSET: Any = object()

#: Old dotted name -> where the module is now. Importing an old name gives the same module
#: object (its classes are the same classes), with a DeprecationWarning; nothing lives at the
#: old paths.
MOVED_MODULES = {
    **{f"helmpinn.{name}": f"helmpinn.problems.{name}"
       for name in ("geometry", "pml", "media", "sources", "batch", "builtin", "scattering", "waves", "registry")},
    **{f"helmpinn.{name}": f"helmpinn.models.{name}" for name in ("model", "decomposition", "model_protocol")},
    **{f"helmpinn.{name}": f"helmpinn.training.{name}" for name in ("trainer", "drivers", "dd_driver")},
    **{f"helmpinn.{name}": f"helmpinn.optim.{name}" for name in ("lm", "gauss_newton")},
    "helmpinn.cli_invert": "helmpinn.cli.invert",
}


def renamed(where: str, new: str, value: Any, old: str, old_value: Any, stacklevel: int = 3) -> Any:
    """``value`` of the argument ``new``, or that of its old name ``old`` (with a
    DeprecationWarning) when only that was given; both given is a TypeError naming them."""
    if old_value is UNSET:
        return value
    if value is not None:
        raise TypeError(f"{where}: {old}= is the old name of {new}=; give only {new}=")
    warnings.warn(f"{where}: {old}= is deprecated, use {new}= (the name n_bc is kept for the "
                  f"boundary normals)", DeprecationWarning, stacklevel=stacklevel)
    return old_value


class _MovedModule(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module name of :data:`MOVED_MODULES` and loads it as the module it moved to."""

    def find_spec(self, name, path=None, target=None):
        if name not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        new = MOVED_MODULES[spec.name]
        warnings.warn(f"{spec.name} moved to {new}: import it from there (or use the helmpinn "
                      f"namespace: hp.Problem, hp.geometry, ...)", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        self._spec = module.__spec__   # the import machinery sets the old name's spec on it
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self._spec   # nothing to run: the module is the moved one, its own spec kept


def find_moved_modules() -> None:
    """Let the old names of :data:`MOVED_MODULES` be imported (once per process)."""
    if not any(isinstance(f, _MovedModule) for f in sys.meta_path):
        sys.meta_path.append(_MovedModule())
