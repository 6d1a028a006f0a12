"""python/helmpinn/_core.pyi against the built helmpinn._core, in the manner of mypy's stubtest
(not a dependency): every public name of the module is in the stub and every name of the stub
is in the module (the stub's own typing helpers aside), class by class the same members of the
same kind (method, static method, read-only property), and the parameters of every function and
method -- names, order, keyword-only or not, defaults -- as pybind11's signature line (the first
line of each docstring) gives them."""
import ast
import pathlib
import re

from helmpinn import _core

STUB = pathlib.Path(_core.__file__).with_name("_core.pyi")
#: Dunders a class's stub leaves out: Python's own (every class has them) and pybind11's repr.
IGNORED_DUNDERS = {"__doc__", "__module__", "__repr__", "__dict__", "__weakref__"}


def _typing_only(node):
    """The stub's names that exist for the type checker only: Protocols, TypedDicts and type
    aliases (an assignment at module level)."""
    if isinstance(node, ast.Assign):
        return True
    if isinstance(node, ast.ClassDef):
        return any(isinstance(b, ast.Name) and b.id in ("Protocol", "TypedDict") for b in node.bases)
    return False


def _stub_names(tree):
    """{name: node} of the stub's module level, the typing helpers left out."""
    out = {}
    for node in tree.body:
        if _typing_only(node):
            continue
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
    return out


def _public(obj):
    return {n for n in dir(obj) if not n.startswith("_")} | ({"__version__"} if obj is _core else set())


def _decorators(fn):
    return {d.id for d in fn.decorator_list if isinstance(d, ast.Name)}


def _stub_members(cls):
    """{name: [kind, node...]} of a stub class: "property" (a @property or an annotated
    attribute; "attribute" when it may be assigned), "staticmethod" or "method" (overloads
    gathered)."""
    out = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = ["attribute", node]
        elif isinstance(node, ast.FunctionDef):
            deco = _decorators(node)
            kind = "property" if "property" in deco else "staticmethod" if "staticmethod" in deco else "method"
            out.setdefault(node.name, [kind]).append(node)
    return out


def _runtime_kind(cls, name):
    raw = cls.__dict__[name]
    if isinstance(raw, property):
        return "attribute" if raw.fset is not None else "property"
    if isinstance(raw, staticmethod):
        return "staticmethod"
    return "method"


def _runtime_signature(obj):
    """pybind11's signature line as an ast.arguments, or None when it gives none (an
    overloaded function, a slot wrapper)."""
    doc = (getattr(obj, "__doc__", None) or "").split("\n", 1)[0]
    name = getattr(obj, "__name__", "")
    if not doc.startswith(name + "(") or "*args, **kwargs" in doc:
        return None
    head = doc.rsplit(" -> ", 1)[0]
    return ast.parse(f"def {head}: ...").body[0].args


def _params(args):
    """[(name, kind, default)]: kind "pos" or "kw"; default the literal, ... for a non-literal,
    None for none; *args and **kwargs as ("*", ...) and ("**", ...)."""
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out = [(a.arg, "pos", d) for a, d in zip(positional, defaults)]
    if args.vararg:
        out.append(("*", "var", None))
    out += [(a.arg, "kw", d) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg:
        out.append(("**", "var", None))
    return out


def _literal(node):
    if node is None:
        return None
    try:
        return ("value", ast.literal_eval(node))
    except ValueError:
        return ("expr", None)


def _compare(where, runtime_args, stub_fns):
    """The stub's overloads against the runtime's one signature: each overload names a subset of
    the runtime's parameters, in its order, of the same kind and default (an overload may leave a
    default out: it narrows the argument); a keyword-only stub parameter the runtime lacks stands
    for one of its **kwargs; together they name all of them. pybind11's ``argN`` (an unnamed
    positional argument) takes the stub's name at its place."""
    rt = _params(runtime_args)
    rt_names = [n for n, _, _ in rt]
    seen = set()
    problems = []
    for fn in stub_fns:
        st = _params(fn.args)
        at = -1
        for j, (name, kind, default) in enumerate(st):
            if kind == "var":
                continue
            if kind == "pos" and j < len(rt) and re.fullmatch(r"arg\d+", rt_names[j]):
                name = rt_names[j]   # pybind11 names an unnamed positional argument argN
            if name not in rt_names:
                if not (kind == "kw" and "**" in rt_names):
                    problems.append(f"{where}: stub parameter {name!r} not in the module's {rt_names}")
                continue
            i = rt_names.index(name)
            if i < at:
                problems.append(f"{where}: parameter {name!r} out of the module's order {rt_names}")
            at = i
            seen.add(name)
            r_kind, r_default = rt[i][1], rt[i][2]
            if r_kind != kind:
                problems.append(f"{where}: parameter {name!r} is {r_kind!r} in the module, {kind!r} in the stub")
            r_lit, s_lit = _literal(r_default), _literal(default)
            if s_lit is not None and r_lit is None or r_lit is not None and s_lit is None and len(stub_fns) == 1:
                problems.append(f"{where}: parameter {name!r} has a default in only one of module and stub")
            elif r_lit and s_lit and r_lit[0] == s_lit[0] == "value" and r_lit[1] != s_lit[1] \
                    and not (len(stub_fns) > 1 and s_lit[1] is not None):   # an overload narrows a default
                problems.append(f"{where}: parameter {name!r} defaults to {r_lit[1]!r} in the module, "
                                f"{s_lit[1]!r} in the stub")
        if "**" in rt_names and not any(n == "**" for n, _, _ in st):
            problems.append(f"{where}: the module takes **kwargs, the stub does not")
    missing = [n for n in rt_names if n not in seen and n not in ("*", "**")]
    if missing:
        problems.append(f"{where}: the module's parameters {missing} are not in the stub")
    return problems


def _check_class(name, node):
    cls = getattr(_core, name)
    members = _stub_members(node)
    problems = []
    runtime = {n for n in vars(cls) if n not in IGNORED_DUNDERS and (n.startswith("__") or not n.startswith("_"))}
    if cls.__dict__.get("__hash__", 0) is None:   # unhashable by __eq__, as every stub class with one is
        runtime.discard("__hash__")
    if "__init__" in runtime and _runtime_signature(cls.__init__) is None:
        runtime.discard("__init__")   # no constructor: pybind11's wrapper
    for extra in sorted(set(members) - runtime):
        problems.append(f"{name}.{extra}: in the stub, not in the module")
    for absent in sorted(runtime - set(members)):
        problems.append(f"{name}.{absent}: in the module, not in the stub")
    for member in sorted(runtime & set(members)):
        kind, *fns = members[member]
        r_kind = _runtime_kind(cls, member)
        if kind != r_kind:
            problems.append(f"{name}.{member}: a {r_kind} in the module, a {kind} in the stub")
            continue
        if kind in ("method", "staticmethod"):
            sig = _runtime_signature(getattr(cls, member))
            if sig is not None:
                problems += _compare(f"{name}.{member}", sig, fns)
    return problems


def _problems(stub_file=STUB):
    stub = _stub_names(ast.parse(pathlib.Path(stub_file).read_text()))
    problems = [f"{n}: in the module, not in the stub" for n in sorted(_public(_core) - set(stub))]
    problems += [f"{n}: in the stub, not in the module" for n in sorted(set(stub) - _public(_core))]
    for name in sorted(set(stub) & _public(_core)):
        node = stub[name]
        if isinstance(node, ast.ClassDef):
            problems += _check_class(name, node)
        elif isinstance(node, ast.FunctionDef):
            sig = _runtime_signature(getattr(_core, name))
            if sig is not None:
                problems += _compare(name, sig, [node])
    return problems


def test_the_stub_names_what_the_module_holds():
    assert _problems() == []


def test_the_check_sees_a_stub_that_drifted(tmp_path):
    """The same check on stubs changed in each way it looks for: a function left out, a name
    the module lacks, a renamed parameter, a keyword-only parameter made positional, a
    changed default, a read-only property written as an assignable attribute."""
    text = STUB.read_text()
    edits = [("def has_cuda() -> bool: ...\n", "", "has_cuda: in the module, not in the stub"),
             ("def has_openmp() -> bool: ...\n", "def has_openmp() -> bool: ...\ndef has_tpu() -> bool: ...\n",
              "has_tpu: in the stub, not in the module"),
             ("def set_num_threads(n: int)", "def set_num_threads(count: int)", "'count' not in the module"),
             ("def zero_grad(self, *, stream", "def zero_grad(self, stream", "is 'kw' in the module, 'pos'"),
             ('batch_size: int = 4096, dtype: DTypeName = "float32"', 'batch_size: int = 1024, dtype: DTypeName = "float32"',
              "defaults to 4096 in the module, 1024 in the stub"),
             ("    @property\n    def num_params(self) -> int: ...", "    num_params: int",
              "ModelSpec.num_params: a property in the module, a attribute in the stub")]
    for old, new, message in edits:
        assert text.count(old) == 1, old
        drifted = tmp_path / "_core.pyi"
        drifted.write_text(text.replace(old, new))
        found = _problems(drifted)
        assert any(message in p for p in found), (message, found)
