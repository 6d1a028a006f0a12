"""The package's modules stand on each other in floors: the imports between helmpinn's modules
that run when a module is imported (those at module level, ``if TYPE_CHECKING:`` blocks left
out) form no cycle, and no function imports another helmpinn module at call time (the way a
cycle used to be hidden) except the few listed in LAZY with their reason. Imports of other
packages (matplotlib, tqdm, mpi4py, SciPy's slower parts) may stay inside functions: they are
optional or slow, and not part of the floors. docs/layout.md describes the floors.

Importing ``helmpinn.a.b`` also runs ``helmpinn/a/__init__.py``, so such an import from outside
``helmpinn.a`` is an edge to ``helmpinn.a`` too (a module inside it runs after its package has
started); ``from . import name`` of a name that is not a module is an edge to the package's
``__init__``."""
import ast
import functools
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "helmpinn"

#: Modules whose functions may import the package's modules, with the reason. (None: the
#: command line imports at module level too, since importing helmpinn loads nearly all of it.)
LAZY_MODULES: dict[str, str] = {}

#: (importing module, imported module) -> why that import sits inside a function. A back edge
#: waiting for its fix; an entry no longer used fails here, so that the list only shrinks.
LAZY = {
    ("helmpinn.survey", "helmpinn.reference"):
        "Survey.synthetic solves with the FD reference, whose package also holds fwi, which "
        "imports Survey: goes when fwi moves to an inversion floor of its own",
    ("helmpinn.problems.obstacles", "helmpinn.reference"):
        "scatter-square-soft's reference is fd_solve (on this floor), whose package's __init__ also "
        "imports fwi (inversion floor): goes with the survey's entry when fwi moves",
}


#: The floors, from the bottom (docs/layout.md): a module imports from its own floor or lower
#: ("": the package's ``__init__``). A new module must be given a floor here.
FLOORS = {
    "base": ["_core", "core", "_checks", "_compat", "_files", "_matcheck", "_blas", "_device", "_signature", "_cxx", "_budget",
             "params", "runfiles"],
    "problems": ["problems.geometry", "problems.pml", "problems.media", "problems.jumps", "problems.sources", "problems.batch",
                 "problems.conditions", "problems.training_set", "problems.medium", "problems.source_terms",
                 "problems.sampler", "problems.problem", "problems", "problems.corners", "problems.singular", "problems.radiation", "problems.builtin", "problems.scattering", "problems.waves", "problems.waves3d",
                 "survey", "distributed", "problems.obstacles", "problems.registry", "reference.obstacle", "reference.fd"],
    "rules": ["defaults"],
    "models and optimisers": ["models.model", "models.decomposition", "models.model_protocol", "models", "optim", "optim.damped",
                              "optim.first_order", "optim.lm", "optim.low_rank", "optim.gauss_newton"],
    "training": ["training.status", "memory", "training.drivers", "training.dd_driver", "training.progress",
                 "training.checkpointing", "training.evaluation", "training.trainer",
                 "training.plan", "training"],
    "figures": ["plots"],
    "inversion": ["reference", "reference.fwi", "inversion", "inversion.medium", "inversion.joint", "inversion.solver", "inversion.result",
                  "inversion.parallel", "inversion.api"],
    "interface": ["estimate", "solving", "receivers", "", "cli.runs", "cli.agreement", "cli.train_options",
                  "cli.train_settings", "cli.train_resume", "cli.train_report", "cli.train", "cli.invert_options",
                  "cli.invert_inputs", "cli.invert_resume", "cli.invert_outputs", "cli.invert", "cli",
                  "cli.__main__", "__main__"],
}


def floor_problems(graph, floors=FLOORS) -> list[str]:
    """The modules on no floor, and the imports that run up to a higher floor."""
    root = PACKAGE.name
    level = {(f"{root}.{m}" if m else root): i for i, mods in enumerate(floors.values()) for m in mods}
    names = list(floors)
    found = [f"{m} is on no floor (FLOORS)" for m in sorted(graph) if m not in level]
    found += [f"{m} ({names[level[m]]}) imports {t} ({names[level[t]]}), a floor above"
              for m in sorted(graph) for t in sorted(graph[m])
              if m in level and t in level and level[t] > level[m]]
    return found


def _module_names(package: pathlib.Path) -> dict[str, pathlib.Path | None]:
    """{dotted name: source file} of every module of the package (subpackages included); the
    compiled ones (``_core``: its stub or its built file) with None."""
    names: dict[str, pathlib.Path | None] = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    for pattern in ("*.pyi", "*.so", "*.pyd"):
        for path in sorted(package.rglob(pattern)):
            parts = list(path.relative_to(package.parent).parts)
            parts[-1] = parts[-1].split(".")[0]
            names.setdefault(".".join(parts), None)
    return names


def _targets(module: str, node: ast.Import | ast.ImportFrom, is_package: bool, names) -> set[str]:
    """The package's modules that ``node`` (in ``module``) runs, parent packages included."""
    found = set()
    if isinstance(node, ast.Import):
        found = {alias.name for alias in node.names}
    else:
        base = module.split(".") if is_package else module.split(".")[:-1]
        if node.level:
            base = base[:len(base) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        for alias in node.names:
            sub = f"{target}.{alias.name}"
            found.add(sub if sub in names else target)
    root = PACKAGE.name
    out = set()
    for name in found:
        if name.split(".")[0] != root:
            continue
        parts = name.split(".")
        for i in range(2, len(parts) + 1):   # helmpinn.a.b runs helmpinn.a too (the root always)
            parent = ".".join(parts[:i])
            inside = module == parent or module.startswith(parent + ".")   # already running
            if parent in names and (i == len(parts) or not inside):
                out.add(parent)
        if name == root:
            out.add(root)
    out.discard(module)
    return out


def _imports(names) -> tuple[dict[str, set[str]], list[tuple[str, str, int]]]:
    """``(graph, lazy)``: {module: the modules its import runs}, and (module, imported module,
    line) for each import inside a function."""
    graph: dict[str, set[str]] = {name: set() for name in names}
    lazy: list[tuple[str, str, int]] = []
    for module, path in names.items():
        if path is None:
            continue
        is_package = path.name == "__init__.py"

        def visit(node: ast.AST, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    for other in child.orelse:
                        visit(other, in_function)
                    continue
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in _targets(module, child, is_package, names):
                        if in_function:
                            lazy.append((module, target, child.lineno))
                        else:
                            graph[module].add(target)
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        visit(ast.parse(path.read_text(), str(path)), False)
    return graph, lazy


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as [a, b, ..., a], or None."""
    state: dict[str, int] = {}   # 1: on the current path, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = walk(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = walk(node)
            if found:
                return found
    return None


def lazy_problems(lazy, allowed=LAZY, modules=LAZY_MODULES) -> list[str]:
    """The function-level imports that no allow-list entry covers, and the entries unused."""
    found = [f"{m}:{line} imports {t} inside a function" for m, t, line in lazy
             if m not in modules and (m, t) not in allowed]
    used = {(m, t) for m, t, _ in lazy}
    found += [f"LAZY lists {m} -> {t}, which is no longer imported inside a function: remove it"
              for m, t in allowed if (m, t) not in used]
    return found


@functools.lru_cache(maxsize=None)
def _package():
    names = _module_names(PACKAGE)
    return names, *_imports(names)


def test_the_module_level_imports_form_no_cycle():
    _, graph, _ = _package()
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_module_imports_from_a_floor_above_its_own():
    _, graph, _ = _package()
    assert floor_problems(graph) == []


def test_no_function_imports_a_module_of_the_package_except_the_listed_ones():
    _, _, lazy = _package()
    assert lazy_problems(lazy) == []


def test_the_graph_sees_the_package():
    names, graph, _ = _package()
    assert {"helmpinn", "helmpinn._core", "helmpinn.reference.fd", "helmpinn.training.trainer"} <= set(names)
    assert "helmpinn.training.trainer" in graph["helmpinn"]   # the package's __init__ imports it
    assert "helmpinn._core" in graph["helmpinn.params"]   # from . import / from ._core import
    assert graph["helmpinn.reference"] >= {"helmpinn.reference.fd", "helmpinn.reference.fwi"}


def test_the_check_sees_a_cycle_and_an_unlisted_lazy_import(tmp_path):
    pkg = tmp_path / "helmpinn"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import f\n")
    (pkg / "a.py").write_text("from .sub.c import g\ndef f():\n    from . import b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\n")
    (pkg / "sub" / "__init__.py").write_text("from .c import g\n")
    (pkg / "sub" / "c.py").write_text("from ..a import f\ndef g():\n    pass\n")
    names = _module_names(pkg)
    graph, lazy = _imports(names)
    assert find_cycle(graph) == ["helmpinn.a", "helmpinn.sub", "helmpinn.sub.c", "helmpinn.a"]
    assert graph["helmpinn.b"] == set()   # a TYPE_CHECKING import runs nothing
    assert lazy == [("helmpinn.a", "helmpinn.b", 3)]
    assert lazy_problems(lazy, {}, {}) == ["helmpinn.a:3 imports helmpinn.b inside a function"]
    assert lazy_problems(lazy, {}, {"helmpinn.a": "why"}) == []
    assert "no longer imported" in lazy_problems([], {("helmpinn.a", "helmpinn.b"): "why"}, {})[0]
    (pkg / "sub" / "c.py").write_text("def g():\n    pass\n")
    assert find_cycle(_imports(names)[0]) is None
    floors = {"low": ["b", "sub.c"], "high": ["", "a", "sub"]}
    assert floor_problems(graph, floors) == ["helmpinn.sub.c (low) imports helmpinn.a (high), a floor above"]
    assert floor_problems(graph, {"high": ["", "a", "sub"]}) == ["helmpinn.b is on no floor (FLOORS)",
                                                                "helmpinn.sub.c is on no floor (FLOORS)"]


@pytest.mark.parametrize("name", ["get_problem", "list_problems", "problem_names", "problem_options",
                                  "register_problem", "_REGISTRY", "cube3d"])
def test_problems_forwards_no_name_of_the_registry(name):
    import helmpinn
    from helmpinn import problems
    from helmpinn.problems import registry

    with pytest.raises(AttributeError):
        getattr(problems, name)
    assert helmpinn.get_problem is registry.get_problem and helmpinn.list_problems is registry.list_problems
