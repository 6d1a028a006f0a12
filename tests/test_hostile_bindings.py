"""Hostile use of the compiled module (issue 24 items 2, 8, 9, 12; issue 26's term table).

Every class helmpinn._core exports, made with ``__new__`` and no ``__init__``, refuses every
method and property cleanly; float32 constants and arrays that overflow are refused, as kappa
always was; arrays that went through pickle are accepted; check_finite scans jvp's v and vjp's
w; the term table is the core's, and the binding needs nothing from the Python package.
"""
from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import helmpinn as hp
from helmpinn import _core
from helmpinn.problems.batch import KEYWORDS, TERM_KEYWORDS, Batch

_PYTHONPATH = os.path.dirname(os.path.dirname(os.path.abspath(hp.__file__)))


def _run(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs ``code`` in a fresh interpreter, so that a crash fails the test, not pytest."""
    env = dict(os.environ, PYTHONPATH=_PYTHONPATH, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=env)


# ----------------------------------------------------------------- item 2: __new__ without __init__
_EVERY_CLASS = """
    import inspect
    import helmpinn._core as core

    SKIP = {"__init__", "__new__", "__setstate__", "__init_subclass__", "__subclasshook__",
            "__class__", "__getattribute__", "__setattr__", "__delattr__", "__dir__",
            "__reduce__", "__reduce_ex__", "__sizeof__", "__format__", "__eq__", "__ne__",
            "__hash__", "__str__", "__doc__", "__module__", "__dict__", "__weakref__",
            "__getstate__", "__lt__", "__le__", "__gt__", "__ge__"}
    GUARD = "__new__ without __init__"
    classes = [c for _, c in sorted(vars(core).items()) if isinstance(c, type)
               and c.__module__ == core.__name__]
    for cls in classes:
        obj = cls.__new__(cls)
        for name in sorted(dir(cls)):
            if name in SKIP or (name.startswith("__") and name not in
                                ("__repr__", "__float__", "__len__", "__cuda_array_interface__",
                                 "__eq__")):
                continue
            raw = inspect.getattr_static(cls, name)
            if isinstance(raw, staticmethod) or type(raw).__name__ == "builtin_function_or_method":
                continue
            messages = []
            if isinstance(raw, property):
                try:
                    getattr(obj, name)
                    messages.append("returned")
                except (TypeError, RuntimeError) as e:
                    messages.append(str(e))
            else:
                for k in range(6):   # the right number of arguments loads self
                    try:
                        getattr(obj, name)(*([1] * k))
                        messages.append("returned")
                    except (TypeError, RuntimeError, ValueError) as e:
                        messages.append(str(e))
            # pybind11's own cross-module hook takes no self: it only has to fail cleanly
            internal = name.startswith("_pybind11")
            ok = (internal or any(GUARD in m for m in messages)) and "returned" not in messages
            print(("ok" if ok else "BAD"), cls.__name__, name, messages[-1][:80], flush=True)
    spec = core.ModelSpec.__new__(core.ModelSpec)
    try:
        core.Workspace(spec, 8)
        print("BAD Workspace(empty spec) returned")
    except TypeError as e:
        print("ok" if GUARD in str(e) else "BAD", "Workspace(empty spec)", e)
    print("classes", " ".join(c.__name__ for c in classes))
"""


def test_every_class_made_by_new_without_init_refuses_every_method():
    r = _run(_EVERY_CLASS)
    assert r.returncode == 0, f"crashed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    lines = r.stdout.splitlines()
    bad = [ln for ln in lines if ln.startswith("BAD")]
    assert not bad, "\n".join(bad)
    classes = lines[-1].split()[1:]
    assert {"DeviceArray", "LossBreakdown", "ModelSpec", "Workspace"} <= set(classes)
    checked = {ln.split()[1] for ln in lines if ln.startswith("ok")}
    assert set(classes) - {"Workspace(empty"} <= checked   # every class had members checked
    assert any(ln.startswith("ok DeviceArray __repr__") for ln in lines)
    assert any(ln.startswith("ok DeviceArray copy_from_host") for ln in lines)
    assert any(ln.startswith("ok LossBreakdown pde") for ln in lines)


def test_loss_breakdown_made_by_new_gives_no_numbers():
    b = _core.LossBreakdown.__new__(_core.LossBreakdown)
    for get in (lambda: b.total, lambda: b.pde, lambda: float(b), lambda: b.as_dict()):
        with pytest.raises(TypeError, match="__new__ without __init__"):
            get()


# ----------------------------------------------------------------- item 8: float32 overflow
def _float32_problem():
    spec = hp.ModelSpec(2, 4, 6, 1)
    ws = hp.Workspace(spec, 16, "float32")
    theta = hp.init_params(spec, "float32", seed=1)
    x = np.random.default_rng(0).uniform(-1, 1, (5, 2)).astype(np.float32)
    return ws, theta, x


@pytest.mark.parametrize("name", ["a_pde", "b_pde", "c_pde"])
@pytest.mark.parametrize("value", [1e39, -1e39, 1j * 1e39, 2.0 - 5e38j])
def test_operator_constants_that_overflow_float32_are_refused(name, value):
    ws, theta, x = _float32_problem()
    with pytest.raises(ValueError, match=rf"^{name} \((real|imaginary) part\): .* overflows float32"):
        ws.residuals(theta, x_pde=x, **{name: value}, **({} if name == "c_pde" else {"kappa": 1.0}))


def test_operator_constants_within_float32_still_work():
    ws, theta, x = _float32_problem()
    r = ws.residuals(theta, x_pde=x, a_pde=3e38, b_pde=-3e38j, c_pde=1.0)   # not refused
    assert r.shape == (2 * len(x),)


@pytest.mark.parametrize("name", ["kappa", "f", "a_pde", "b_pde", "c_pde"])
def test_per_point_arrays_that_overflow_float32_are_refused_by_the_batch(name):
    n, d = 5, 2
    x = np.zeros((n, d))
    big = {"kappa": np.full(n, 1e39), "f": np.full(n, 1e39 + 0j), "a_pde": np.full((n, d), 4e38j),
           "b_pde": np.full((n, d, 2), -1e39), "c_pde": np.full(n, 1e39 + 0j)}[name]
    extra = {} if name in ("kappa", "c_pde") else {"kappa": 1.0}
    with pytest.raises(ValueError, match=rf"^{name}: .* \(at flat index \d+\) overflows float32"):
        Batch(x_pde=x, **{name: big}, **extra, dtype="float32")
    Batch(x_pde=x, **{name: big}, **extra, dtype="float64")   # fits float64


# ----------------------------------------------------------------- item 9: pickled arrays
def _roundtrip(a):
    return pickle.loads(pickle.dumps(a))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_arrays_that_went_through_pickle_are_accepted(dtype):
    spec = hp.ModelSpec(2, 4, 6, 1)
    rng = np.random.default_rng(3)
    theta = hp.init_params(spec, dtype, seed=0)
    x = rng.uniform(-1, 1, (7, 2)).astype(dtype)
    kappa = rng.uniform(1, 2, 7).astype(dtype)
    ws = hp.Workspace(spec, 16, _roundtrip(np.dtype(dtype)))
    g1, g2 = np.empty_like(theta), _roundtrip(np.empty_like(theta))
    loss = ws.value_and_grad(theta, g1, x_pde=x, kappa=kappa)
    loss2 = ws.value_and_grad(_roundtrip(theta), g2, x_pde=_roundtrip(x), kappa=_roundtrip(kappa))
    assert loss2 == loss
    np.testing.assert_array_equal(g1, g2)
    np.testing.assert_array_equal(ws.forward(_roundtrip(theta), _roundtrip(x)), ws.forward(theta, x))
    out = _core.mse_backward(_roundtrip(x), _roundtrip(x + 1))
    np.testing.assert_array_equal(out, _core.mse_backward(x, x + 1))
    assert set(spec.views(_roundtrip(theta))) == set(spec.views(theta))
    b = _roundtrip(Batch(x_pde=x, kappa=kappa, dtype=dtype))
    np.testing.assert_array_equal(ws.residuals(theta, batch=b), ws.residuals(theta, x_pde=x, kappa=kappa))


def test_arrays_of_another_byte_order_are_still_refused():
    spec = hp.ModelSpec(2, 4, 6, 1)
    ws = hp.Workspace(spec, 16, "float64")
    theta = hp.init_params(spec, "float64", seed=0)
    with pytest.raises(TypeError, match=r"params: expected a float64 array .*got dtype >f8"):
        ws.forward(theta.astype(">f8"), np.zeros((3, 2)))


def test_a_model_that_went_through_pickle_predicts():
    model = hp.Model.create(2, 4, 6, 1, dtype="float64", seed=0)
    x = np.random.default_rng(1).uniform(-1, 1, (9, 2))
    for other in (_roundtrip(model), copy.deepcopy(model)):
        np.testing.assert_array_equal(other.predict(x), model.predict(x))


def test_a_model_that_has_predicted_still_pickles_and_deep_copies():
    """predict() caches a Workspace (native buffers, not picklable): pickling and deepcopy leave
    the cache out and the copy rebuilds it."""
    model = hp.Model.create(2, 4, 6, 1, dtype="float64", seed=0)
    x = np.random.default_rng(1).uniform(-1, 1, (9, 2))
    want = model.predict(x)
    for other in (_roundtrip(model), copy.deepcopy(model)):
        np.testing.assert_array_equal(other.predict(x), want)
    assert model._ws is not None   # the original keeps its cache


# ----------------------------------------------------------------- item 12: check_finite v and w
@pytest.mark.parametrize("op", ["jvp", "vjp"])
def test_check_finite_scans_jvp_v_and_vjp_w(op):
    spec = hp.ModelSpec(2, 4, 6, 1)
    ws = hp.Workspace(spec, 16, "float64")
    theta = hp.init_params(spec, "float64", seed=0)
    x = np.random.default_rng(2).uniform(-1, 1, (5, 2))
    kw = dict(x_pde=x, kappa=2.0)
    name, vec = ("v", np.zeros_like(theta)) if op == "jvp" else ("w", np.zeros(10))
    vec[3] = np.nan
    getattr(ws, op)(theta, vec, **kw)   # not scanned unless asked
    with pytest.raises(ValueError, match=rf"^{name} contains NaN or Inf \(at flat index 3\)"):
        getattr(ws, op)(theta, vec, **kw, check_finite=True)
    vec[3] = 0.0
    getattr(ws, op)(theta, vec, **kw, check_finite=True)


# ----------------------------------------------------------------- issue 26: the term table
def test_the_term_table_comes_from_the_core():
    terms = _core.loss_terms()
    assert [t["term"] for t in terms] == ["pde", "data", "bc"]
    assert [t["weight"] for t in terms] == ["w_pde", "w_data", "w_bc"]
    assert TERM_KEYWORDS == {t["term"]: tuple(a["keyword"] for a in t["arrays"]) for t in terms}
    assert KEYWORDS[-1] == "counts" and len(KEYWORDS) == 14
    for t in terms:
        points = t["arrays"][0]
        assert points["shape"] == ("N", "d") and points["required"] and points["constant"] is None
    lb = hp.Workspace(hp.ModelSpec(1, 2, 3, 1), 4, "float64").value_and_grad(
        hp.init_params(hp.ModelSpec(1, 2, 3, 1), "float64", seed=0), np.empty(
            hp.ModelSpec(1, 2, 3, 1).num_params), x_pde=np.zeros((2, 1)), kappa=1.0, breakdown=True)
    assert list(lb.as_dict()) == ["total", "pde", "data", "bc"]
    assert repr(lb).startswith("LossBreakdown(total=")


def test_the_breakdown_is_per_term_of_the_table():
    """A LossBreakdown's terms are the table's: ``terms`` is a dict keyed by loss_terms()'s
    names in their order, each value the property of that name, and as_dict() is the total
    and the same terms."""
    names = [t["term"] for t in _core.loss_terms()]
    spec = hp.ModelSpec(2, 3, 4, 1)
    rng = np.random.default_rng(3)
    x, n = rng.uniform(-1, 1, (6, 2)), rng.normal(size=(6, 2))
    lb = hp.Workspace(spec, 4, "float64").value_and_grad(
        hp.init_params(spec, "float64", seed=1), np.empty(spec.num_params), x_pde=x, kappa=2.0,
        x_data=x[:3], y=rng.normal(size=(3, 2)), x_bc=x, n_bc=n, w_data=0.5, breakdown=True)
    assert list(lb.terms) == names
    assert lb.terms == {t: getattr(lb, t) for t in names} and all(v > 0 for v in lb.terms.values())
    assert lb.as_dict() == {"total": lb.total, **lb.terms}
    assert lb.total == pytest.approx(lb.pde + 0.5 * lb.data + lb.bc, rel=1e-14)


def test_every_keyword_of_the_table_reaches_the_core():
    """An unknown keyword is named; each of the table's keywords is taken (a misspelt entry in
    the table would be refused as unexpected)."""
    spec = hp.ModelSpec(2, 4, 6, 1)
    ws = hp.Workspace(spec, 16, "float64")
    theta = hp.init_params(spec, "float64", seed=0)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'x_pdf' \(batch keywords: "
                                        r"batch, x_pde, kappa, f, a_pde, b_pde, c_pde, a_lap, x_data, y, "
                                        r"x_bc, n_bc, alpha_bc, g_bc, w_pde, w_data, w_bc, counts"):
        ws.residuals(theta, x_pdf=np.zeros((2, 2)))
    for keys in TERM_KEYWORDS.values():
        for k in keys[1:]:
            with pytest.raises(ValueError, match=rf"^{k}: given without {keys[0]}"):
                ws.residuals(theta, **{k: np.zeros((2, 2))})


_NO_PACKAGE = """
    import importlib.abc, importlib.machinery, importlib.util, sys
    import numpy as np

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "helmpinn" or name.startswith("helmpinn."):
                raise ImportError("the binding imported " + name)
            return None

    sys.meta_path.insert(0, Block())
    spec = importlib.util.spec_from_file_location("_core", {path!r})
    core = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(core)

    class MyBatch:   # any object with __helmpinn_batch__ serves as batch=
        def __helmpinn_batch__(self):
            return {{"x_pde": np.zeros((3, 2)), "kappa": 2.0, "counts": {{"pde": 5}}}}, np.dtype("float64")

    s = core.ModelSpec(2, 4, 6, 1)
    ws = core.Workspace(s, 8, "float64")
    theta = np.zeros(s.num_params)
    r1 = ws.residuals(theta, batch=MyBatch())
    r2 = ws.residuals(theta, x_pde=np.zeros((3, 2)), kappa=2.0, counts={{"pde": 5}})
    assert np.array_equal(r1, r2)
    try:
        ws.residuals(theta, batch={{"x_pde": np.zeros((3, 2))}})
    except TypeError as e:
        print(e)
    print("imported:", sorted(m for m in sys.modules if m.startswith("helmpinn")))
"""


def test_the_binding_does_not_import_the_python_package():
    r = _run(_NO_PACKAGE.format(path=_core.__file__))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "batch: expected a helmpinn.Batch, got dict" in r.stdout
    assert r.stdout.strip().endswith("imported: []")


def test_cholesky_solves_checks_its_arguments():
    """_core.cholesky_solves (the block preconditioner's solves, helmpinn.optim.gauss_newton) calls a
    BLAS function pointer on raw memory: every argument that could make it read or write out of
    place is refused with ValueError naming the argument, before anything runs."""
    from scipy.linalg import cython_blas
    s, d = cython_blas.__pyx_capi__["strsv"], cython_blas.__pyx_capi__["dtrsv"]
    U = np.asfortranarray(np.eye(3, dtype=np.float32) * 2)
    x = np.ones(6, np.float32)
    bad = [
        (dict(trsv=d), "trsv"),                       # the float64 routine for float32 data
        (dict(trsv=cython_blas.__pyx_capi__["sgemv"]), "trsv"),
        (dict(trsv=1), "trsv"),
        (dict(factors=[U.astype(np.float64)]), r"factors\[0\]"),
        (dict(factors=[np.ascontiguousarray(np.arange(6, dtype=np.float32).reshape(2, 3))]), r"factors\[0\]"),
        (dict(factors=[np.ascontiguousarray(U[:, :2].T @ U[:, :2] + np.arange(4, dtype=np.float32).reshape(2, 2))]),
         r"factors\[0\]"),                            # C-ordered (not symmetric): refused
        (dict(starts=[4]), r"starts\[0\]"),           # [4, 7) beyond x
        (dict(starts=[-1]), r"starts\[0\]"),
        (dict(starts=[1.0]), r"starts\[0\]"),
        (dict(starts=[0, 3]), "starts"),              # one start per factor
        (dict(factors=[U, U], starts=[0, 2]), "overlap"),
        (dict(x=np.ones((2, 3), np.float32)), "x"),
        (dict(x=np.ones(6, np.float32)[::2]), "x"),
        (dict(x=np.ones(6, np.int32)), "x"),
        (dict(factors=(U,)), "factors"),
    ]
    ro = np.ones(6, np.float32)
    ro.setflags(write=False)
    bad.append((dict(x=ro), "x"))
    for change, name in bad:
        args = dict(trsv=s, factors=[U], starts=[0], x=x.copy()) | change
        with pytest.raises(ValueError, match=name):
            _core.cholesky_solves(**args)
    y = x.copy()
    empty = np.zeros((0, 0), np.float32, order="F")
    _core.cholesky_solves(s, [U, empty], [3, 1], y)   # the block [3, 6): (UᵀU)⁻¹ = I/4 there, the rest untouched
    np.testing.assert_array_equal(y, [1, 1, 1, 0.25, 0.25, 0.25])


def test_gram_blocks_checks_its_arguments():
    """_core.gram_blocks (the preconditioner's Gram matrices, helmpinn.optim.gauss_newton) calls a BLAS
    function pointer on raw memory from the engine's threads: every argument that could make it
    read or write out of place, or two threads write the same memory, is refused with ValueError
    naming the argument, before anything runs."""
    from scipy.linalg import cython_blas
    s, d = cython_blas.__pyx_capi__["ssyrk"], cython_blas.__pyx_capi__["dsyrk"]
    J = np.arange(12, dtype=np.float32).reshape(4, 3)
    G = np.zeros((3, 3), np.float32, order="F")
    shared = np.zeros((3, 6), np.float32, order="F")
    buf = np.zeros(30, np.float32)
    bad = [
        (dict(syrk=d), "syrk"),                       # the float64 routine for float32 data
        (dict(syrk=cython_blas.__pyx_capi__["strsv"]), "syrk"),
        (dict(syrk=cython_blas.__pyx_capi__["sgemm"]), "syrk"),
        (dict(syrk=1), "syrk"),
        (dict(blocks=[J.astype(np.float64)]), "syrk"),   # float64 blocks: dsyrk expected
        (dict(syrk=d, blocks=[J.astype(np.float64)]), r"grams\[0\]"),   # the outputs' dtype differs
        (dict(blocks=[J, J.astype(np.float64)], grams=[G, G.astype(np.float64, order="F")]), r"blocks\[1\]"),
        (dict(blocks=[np.asfortranarray(J)]), r"blocks\[0\]"),
        (dict(blocks=[J.ravel()]), r"blocks\[0\]"),
        (dict(blocks=[J.astype(np.int32)]), r"blocks\[0\]"),
        (dict(blocks=[J, J[:, :2].copy()], grams=[G]), "grams"),   # one output per block
        (dict(grams=[np.zeros((3, 3), np.float32)[:, :2]]), r"grams\[0\]"),
        (dict(grams=[np.zeros((2, 2), np.float32, order="F")]), r"grams\[0\]"),
        (dict(grams=[np.zeros((3, 3), np.float64, order="F")]), r"grams\[0\]"),
        (dict(grams=[np.zeros((4, 4), np.float32, order="F")[:3, :3]]), r"grams\[0\]"),   # not contiguous
        (dict(blocks=[J, J], grams=[G, G]), "share memory"),
        (dict(blocks=[J, J], grams=[shared[:, :3], shared[:, 2:5]]), "share memory"),
        (dict(blocks=[buf[:12].reshape(4, 3)], grams=[buf[3:12].reshape(3, 3).T]),
         r"grams\[0\]: shares memory"),   # an output inside an input block (another thread reads it)
        (dict(blocks=(J,)), "blocks"),
    ]
    ro = np.zeros((3, 3), np.float32, order="F")
    ro.setflags(write=False)
    bad.append((dict(grams=[ro]), r"grams\[0\]"))
    for change, name in bad:
        args = dict(syrk=s, blocks=[J], grams=[G.copy(order="F")]) | change
        with pytest.raises(ValueError, match=name):
            _core.gram_blocks(**args)
    _core.gram_blocks(s, [], [])
    out = [np.full((3, 3), 7, np.float32, order="F"), np.zeros((0, 0), np.float32, order="F")]
    _core.gram_blocks(s, [J, np.zeros((5, 0), np.float32)], out)   # the strict lower triangle left as it is
    full = J.T @ J
    np.testing.assert_allclose(np.triu(out[0]), np.triu(full), rtol=1e-6)
    assert np.all(out[0][np.tril_indices(3, -1)] == 7)


def test_product_blocks_checks_its_arguments():
    """_core.product_blocks (the mode rows' gradients J_jᵀF_j, helmpinn.optim.gauss_newton) calls a
    BLAS function pointer on raw memory from the engine's threads: every argument that could make
    it read or write out of place, or two threads write the same memory, is refused with
    ValueError naming the argument, before anything runs; blocks without rows give zeros."""
    from scipy.linalg import cython_blas
    s, d = cython_blas.__pyx_capi__["sgemm"], cython_blas.__pyx_capi__["dgemm"]
    A = np.arange(12, dtype=np.float32).reshape(4, 3)
    B = np.arange(8, dtype=np.float32).reshape(4, 2) - 3
    O = np.zeros((3, 2), np.float32, order="F")
    shared = np.zeros((3, 3), np.float32, order="F")
    buf = np.zeros(30, np.float32)
    bad = [
        (dict(gemm=d), "gemm"),
        (dict(gemm=cython_blas.__pyx_capi__["ssyrk"]), "gemm"),
        (dict(gemm=cython_blas.__pyx_capi__["sgemv"]), "gemm"),
        (dict(gemm="sgemm"), "gemm"),
        (dict(a=[A.astype(np.float64)]), "gemm"),               # float64 blocks: dgemm expected
        (dict(gemm=d, a=[A.astype(np.float64)]), r"b\[0\]"),   # b's dtype differs
        (dict(a=[np.asfortranarray(A)]), r"a\[0\]"),
        (dict(a=[A.astype(np.int64)]), r"a\[0\]"),
        (dict(b=[B[:3]]), r"b\[0\]"),                            # rows differ from a's
        (dict(b=[np.asfortranarray(B)]), r"b\[0\]"),
        (dict(b=[B, B]), "b"),
        (dict(out=[]), "out"),
        (dict(out=[np.zeros((3, 2), np.float32)]), r"out\[0\]"),          # C-ordered
        (dict(out=[np.zeros((2, 3), np.float32, order="F")]), r"out\[0\]"),
        (dict(out=[np.zeros((3, 2), np.float64, order="F")]), r"out\[0\]"),
        (dict(a=[A, A], b=[B, B], out=[O, O]), "share memory"),
        (dict(a=[A, A], b=[B, B], out=[shared[:, :2], shared[:, 1:]]), "share memory"),
        (dict(a=[buf[:12].reshape(4, 3)], b=[B], out=[buf[6:12].reshape(2, 3).T]), r"out\[0\]: shares memory"),
        (dict(b=[buf[:8].reshape(4, 2)], out=[buf[:6].reshape(2, 3).T]), r"out\[0\]: shares memory"),
        (dict(a=(A,)), "a: expected a list"),
    ]
    ro = np.zeros((3, 2), np.float32, order="F")
    ro.setflags(write=False)
    bad.append((dict(out=[ro]), r"out\[0\]"))
    for change, name in bad:
        args = dict(gemm=s, a=[A], b=[B], out=[O.copy(order="F")]) | change
        with pytest.raises(ValueError, match=name):
            _core.product_blocks(**args)
    _core.product_blocks(s, [], [], [])
    out = [np.full((3, 2), 7, np.float32, order="F"), np.full((3, 2), 7, np.float32, order="F")]
    _core.product_blocks(s, [A, np.zeros((0, 3), np.float32)], [B, np.zeros((0, 2), np.float32)], out)
    np.testing.assert_array_equal(out[0], A.T @ B)
    np.testing.assert_array_equal(out[1], 0)   # no rows: the empty sum
