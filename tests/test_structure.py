"""The structural limits of the code (the project's standards): no Python class over 350 lines,
no function over 120, no binding file over 600 lines. The pieces over them when this test was
written are listed with their size then, as a ceiling: they may shrink (and leave the list once
under the limit; a listed piece under it fails here so that the list stays true), never grow,
and nothing new may join them."""
import ast
import functools
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "helmpinn"
BINDINGS = ROOT / "cpp" / "bindings"
CLASS_LINES, FUNCTION_LINES, BINDING_LINES = 350, 120, 600

#: (file, name) -> lines: the pieces over their limit, at their size when this test was written.
OVER: dict = {}


@functools.lru_cache(maxsize=None)
def _sizes():
    """{(file, name): lines} of every class and function (methods, nested ones) of the package
    and of every binding file (name None)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):   # subpackages too (reference/, inversion/)
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                key = (path.relative_to(PACKAGE).as_posix(), node.name)
                lines = node.end_lineno - node.lineno + 1
                kind = "class" if isinstance(node, ast.ClassDef) else "function"
                out[key] = max(out.get(key, (0, kind))[0], lines), kind
    for path in sorted(BINDINGS.iterdir()):
        if path.suffix in (".cpp", ".hpp", ".h"):
            out[(path.name, None)] = len(path.read_text().splitlines()), "binding file"
    return out


def _problems(sizes, over=OVER):
    limit = {"class": CLASS_LINES, "function": FUNCTION_LINES, "binding file": BINDING_LINES}
    found = []
    for key, (lines, kind) in sorted(sizes.items(), key=str):
        ceiling = over.get(key)
        what = f"{key[0]}{'' if key[1] is None else ': ' + key[1]} ({kind}, {lines} lines)"
        if ceiling is None and lines > limit[kind]:
            found.append(f"{what}: over the limit of {limit[kind]}")
        elif ceiling is not None and lines > ceiling:
            found.append(f"{what}: grew past its recorded {ceiling}; split it rather than add to it")
        elif ceiling is not None and lines <= limit[kind]:
            found.append(f"{what}: now within the limit of {limit[kind]}; remove it from OVER")
    found += [f"{k}: listed in OVER but not found" for k in over if k not in sizes]
    return found


def test_classes_functions_and_binding_files_stay_within_their_limits():
    assert _problems(_sizes()) == []


#: A recorded exception, for the check's own test (the list itself is empty).
_EXAMPLE = {("recorded.hpp", None): 608}


@pytest.mark.parametrize("change, message", [
    ((("cli/train.py", "command"), 121, "function"), "over the limit of 120"),
    ((("recorded.hpp", None), 609, "binding file"), "grew past its recorded 608"),
    ((("recorded.hpp", None), 600, "binding file"), "now within the limit of 600"),
    ((("new.hpp", None), 601, "binding file"), "over the limit of 600"),
    ((("other.hpp", None), 10, "binding file"), "listed in OVER but not found"),
])
def test_the_check_sees_each_kind_of_breach(change, message):
    key, lines, kind = change
    sizes = {**_sizes(), key: (lines, kind)}
    if key[0] == "other.hpp":   # the recorded piece is gone
        sizes.pop(next(iter(_EXAMPLE)), None)
    else:
        sizes.setdefault(("recorded.hpp", None), (608, "binding file"))
    problems = _problems(sizes, _EXAMPLE)
    assert any(message in p for p in problems), problems
