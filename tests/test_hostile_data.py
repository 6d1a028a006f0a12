"""Hostile problem data and data files (issue 61, findings 8, 9, 11, 18 and 19's problem parts):
each test fails without its fix.

8: the closed-box resonance check at a large κ is bounded in memory and time; 9: non-finite
problem data (κ, the source, a condition's value, data, a PointSource's width) is named with its
first bad point, not blamed on the parameters; 11: a PointCloud problem without test points
reports no error of 0; 18: the GridField loaders name the file and what is wrong in one
ValueError each; 19: a PointSource outside the domain, a background source on its boundary.
"""
from __future__ import annotations

import itertools
import math
import os
import re
import sys
import threading
import tracemalloc
import types
import warnings

import numpy as np
import pytest

import helmpinn as hp
from helmpinn import waves
from helmpinn.problems.geometry import Box, PointCloud
from helmpinn.problems.media import GridField

BOX = Box([0.0, 0.0], [1.0, 1.0])


# -- 8: resonances of a large closed box ---------------------------------------------------------
def test_resonance_warning_of_a_large_cube_is_bounded_in_memory():
    """cube3d at k = 2000 (4 million modes within 1% of κ) is checked in bounded memory: the grid
    of every mode took (√κ L/π)³ · 8 bytes several times over (a MemoryError in the CLI's note)."""
    p = hp.get_problem("cube3d", k=2000.0)
    tracemalloc.start()
    try:
        words = waves.resonance_warning(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20
    mode = tuple(int(m) for m in words.split("its mode (")[1].split(")")[0].split(", "))
    lam = math.pi ** 2 * sum(m * m for m in mode)
    assert abs(lam - p.kappa) <= 0.01 * p.kappa and "amplified" in words


@pytest.mark.parametrize("problem,within", [
    (hp.get_problem("dirichlet2d", n=8), 0.05),
    (hp.get_problem("cube3d", k=8 * math.pi), 0.035),
    (hp.Problem(Box([0.0, 0.0, -1.0], [2.0, 0.7, 0.5]), kappa=900.0,
                bcs={("xmin", "ymax", "zmin"): hp.Dirichlet(), ("xmax", "ymin", "zmax"): hp.Neumann()}), 0.02),
])
def test_most_modes_and_the_count_agree_with_every_mode(problem, within):
    """The ``most`` most amplified are the full list's first ones, the mode rows' modes are the
    finite ones of the full list, and the warning counts every mode of a brute-force search over
    indices to 40 per axis."""
    full = waves.box_resonances(problem, within)
    for most in (1, 4, 32):
        assert waves.box_resonances(problem, within, most=most) == full[:most]
        finite = [m for m in full if math.isfinite(m.amplification) and m.amplification > 1][:most]
        assert waves._weighted_modes("t", problem, within, 1000.0, most)[0] == finite
    lo, hi = problem.domain.bounds
    axes = []
    for a in range(problem.dim):
        d0, d1 = (isinstance(problem.bcs["xyz"[a] + s], hp.Dirichlet) for s in ("min", "max"))
        shift, first = (0.0, 1) if d0 and d1 else (0.0, 0) if not (d0 or d1) else (0.5, 0)
        axes.append([((m + shift) * math.pi / (hi[a] - lo[a])) ** 2 for m in range(first, 41)])
    brute = sum(abs(sum(c) - problem.kappa) <= within * problem.kappa for c in itertools.product(*axes))
    assert brute == len(full) > 0
    assert f"({brute:,} mode(s) within" in waves.resonance_warning(problem, within)


# -- 9: non-finite problem data --------------------------------------------------------------------
def _nan_beyond(value, edge=0.9):
    return lambda x: np.where(x[:, 0] > edge, np.nan, value) + 0 * x[:, 1]


@pytest.mark.parametrize("keywords,named", [
    ({"kappa": _nan_beyond(100.0), "wavenumber": 10.0}, "kappa is not finite at PDE point"),
    ({"kappa": 100.0, "source": _nan_beyond(1.0)}, "the source is not finite at PDE point"),
    ({"kappa": 100.0, "bcs": {"xmax": hp.Dirichlet(lambda x: np.full(len(x), np.inf)), "*": hp.Dirichlet()}},
     "the Dirichlet value on 'xmax' is not finite at boundary point"),
    ({"kappa": 100.0, "bcs": {"*": hp.Robin(1.0, lambda x, n: np.full(len(x), np.nan))}},
     "the Robin g on 'xmin' is not finite"),
    ({"kappa": 100.0, "a": _nan_beyond(1.0)}, "a must be finite"),
    ({"kappa": 100.0, "density": lambda x: np.ones(len(x)), "density_grad":
      lambda x: np.where(x[:, :1] > 0.9, np.nan, np.zeros_like(x))}, "the operator's b .* is not finite at PDE point"),
])
def test_non_finite_problem_data_is_named_with_its_point(keywords, named):
    """Each sampled array is checked once per draw; the error names it, its first bad point's
    index and coordinates (was: a non-finite loss blamed on the parameters under LM/GN)."""
    keywords = {"bcs": {"*": hp.Dirichlet()}, **keywords}
    p = hp.Problem(BOX, **keywords)
    with pytest.raises(ValueError, match=named) as info:
        p.sample(500, 64, rng=0)
    if "PDE point" in named:   # the point named is one of the bad ones
        x = np.array(eval(str(info.value).split("x = ")[1].split(" (value")[0]))
        assert x[0] > 0.9


def test_solve_raises_on_a_nan_kappa_instead_of_returning_the_untrained_model():
    p = hp.Problem(BOX, kappa=_nan_beyond(100.0), wavenumber=10.0, source=lambda x: np.ones(len(x)),
                   bcs={"*": hp.Dirichlet()})
    with pytest.raises(ValueError, match="kappa is not finite at PDE point .* x = "):
        hp.solve(p, time_limit=5)


def test_nan_data_and_a_kappa_that_is_nan_everywhere_are_named_when_the_problem_is_built():
    with pytest.raises(ValueError, match="data's y is not finite at data point 1 of 2"):
        hp.Problem(BOX, kappa=1.0, bcs={"*": None}, data=([[0.5, 0.5], [0.2, 0.2]], [1.0, np.nan]))
    with pytest.raises(ValueError, match=r"kappa is not finite at probe point \(for the wavenumber\) 0 of 4096"):   # was: "wavenumber"
        hp.Problem(BOX, kappa=lambda x: np.full(len(x), np.nan), bcs={"*": None})
    with pytest.raises(ValueError, match="PointCloud: interior must be finite"):
        PointCloud([[0.1, 0.2], [np.nan, 0.3]])


@pytest.mark.parametrize("width,dim", [(1e-200, 2), (1e-160, 1), (1e-160, 2), (1e-120, 3), (1e160, 1), (1e300, 3)])
def test_a_point_source_whose_normalisation_under_or_overflows_is_refused(width, dim):
    with pytest.raises(ValueError, match="PointSource: width .* out of range"):
        hp.PointSource([0.5] * dim, width=width)


def test_the_narrowest_accepted_widths_give_a_finite_source():
    for width, dim in [(1e-150, 1), (1e-150, 2), (1e-100, 3)]:
        src = hp.PointSource([0.0] * dim, amplitude=3.0, width=width)
        x = np.array([[0.0] * dim, [width] * dim, [1.0] * dim])
        assert np.all(np.isfinite(src(x))) and abs(src(x[:1])[0]) > 0


# -- 11: a PointCloud without test points ----------------------------------------------------------
def _cloud(interior):
    edge = np.array([[0.0, 0.5], [1.0, 0.5]])
    return PointCloud(np.reshape(interior, (-1, 2)), edge, np.array([[-1.0, 0.0], [1.0, 0.0]]))


def test_a_point_cloud_without_test_points_is_refused_with_an_exact_solution():
    """Its error was the norm of nothing: 0, a target "reached" at the first evaluation."""
    exact = lambda x: np.ones(len(x), complex)  # noqa: E731
    with pytest.raises(ValueError, match="PointCloud's interior points .* none .0 interior"):
        hp.Problem(_cloud(np.empty((0, 2))), kappa=1.0, bcs={"*": hp.Dirichlet(1.0)}, exact=exact)
    in_layer = PointCloud([[0.05, 0.5], [0.95, 0.5]], [[0.0, 0.0], [1.0, 1.0]], [[-1.0, 0.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match="none .2 interior point"):   # both in the PML
        hp.Problem(in_layer, kappa=100.0, bcs={"*": hp.Dirichlet(0.0)}, exact=exact, pml=hp.PML(0.2))
    p = hp.Problem(_cloud(np.empty((0, 2))), kappa=1.0, bcs={"*": hp.Dirichlet(1.0)})
    p.exact = exact                                       # set after the problem was built
    with pytest.raises(ValueError, match="has none"):
        hp.Trainer(p, hp.Model.create(2, 4, 8, 1, seed=0))


# -- 18: the GridField loaders ---------------------------------------------------------------------
def _npy_with_header(path, shape, payload=b"\0" * 64, dtype="<f8"):
    header = {"descr": dtype, "fortran_order": False, "shape": shape}
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(payload)


def test_npy_header_claiming_12_gb_is_refused_before_allocating(tmp_path):
    path = tmp_path / "big.npy"
    _npy_with_header(path, (40000, 40000))
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"big\.npy' is truncated or corrupt: its header says shape "
                                             r"\(40000, 40000\) of float64 \(12,800,000,000 bytes\)"):
            GridField.from_npy(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20


def test_npy_files_that_are_not_a_plain_array_are_named(tmp_path):
    np.save(tmp_path / "cut.npy", np.ones((8, 8)))
    data = (tmp_path / "cut.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[:-100])
    (tmp_path / "junk.npy").write_bytes(b"hello world, not numpy")
    (tmp_path / "head.npy").write_bytes(data[:20])
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.savez(tmp_path / "two.npz", a=np.ones(4), b=np.ones(4))
    cases = {"cut.npy": "truncated or corrupt", "junk.npy": "not a .npy file",
             "head.npy": "no valid .npy header", "obj.npy": "Python objects",
             "two.npz": r"several arrays \(an \.npz\)"}
    for name, what in cases.items():
        with pytest.raises(ValueError, match=rf"from_npy: '.*{name}' .*{what}"):
            GridField.from_npy(tmp_path / name)
    np.save(tmp_path / "nan.npy", np.full((5, 5), np.nan))
    with pytest.raises(ValueError, match=r"from_npy: '.*nan\.npy': GridField: values must be finite"):
        GridField.from_npy(tmp_path / "nan.npy")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_loaders_refuse_a_fifo_without_blocking(tmp_path):
    """A loader on a FIFO blocked forever in its open (np.load, loadmat): run in a thread that
    a writer releases if it blocks, so that the test fails instead of hanging."""
    for loader in (GridField.from_npy, GridField.from_mat):
        fifo = tmp_path / f"pipe_{loader.__name__}"
        os.mkfifo(fifo)
        caught: list[BaseException] = []

        def load(loader=loader, fifo=fifo):
            try:
                loader(fifo)
            except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
                caught.append(exc)

        thread = threading.Thread(target=load, daemon=True)
        thread.start()
        thread.join(5.0)
        blocked = thread.is_alive()
        if blocked:   # release the reader: a writer that closes at once gives it end-of-file
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            thread.join(5.0)
        assert not blocked, f"{loader.__name__} blocked on a FIFO"
        assert len(caught) == 1 and isinstance(caught[0], ValueError) and "not a regular file" in str(caught[0])


def test_mat_files_name_the_file_and_what_is_wrong(tmp_path):
    from scipy import io, sparse

    head = b"MATLAB 7.3 MAT-file, Platform: GLNXA64".ljust(116) + b"\0" * 8 + b"\x00\x02IM"
    (tmp_path / "v73.mat").write_bytes(head + b"\0" * 512)
    io.savemat(tmp_path / "sparse.mat", {"A": sparse.random(6, 6, density=0.5, format="csc", random_state=0)})
    io.savemat(tmp_path / "mixed.mat", {"A": sparse.eye(5, format="csc"), "name": "model",
                                        "cells": np.array([np.ones(2), "x"], dtype=object)})
    io.savemat(tmp_path / "full.mat", {"v": np.random.default_rng(0).random((20, 30))})
    data = (tmp_path / "full.mat").read_bytes()
    (tmp_path / "cut.mat").write_bytes(data[: len(data) // 2])
    (tmp_path / "junk.mat").write_bytes(b"\xff" * 300)
    cases = [("v73.mat", None, "is a MATLAB v7.3 .HDF5. file"),
             ("sparse.mat", None, r"holds no full numeric array; its variables: 'A' \(a sparse matrix\)"),
             ("sparse.mat", "A", "variable 'A' in '.*sparse.mat' is a sparse matrix"),
             ("mixed.mat", "name", "variable 'name' .* is text"),
             ("mixed.mat", "cells", "is a cell array"),
             ("mixed.mat", "rho", r"no variable 'rho' in '.*mixed.mat'; it has 'A' \(a sparse matrix\), "
                                  r"'cells' \(a cell array or object\), 'name' \(text\)"),
             ("cut.mat", None, "cut.mat' is not a readable MATLAB file, truncated or corrupt"),
             ("junk.mat", None, "junk.mat' is not a readable MATLAB file")]
    for name, key, what in cases:
        with pytest.raises(ValueError, match=what):
            GridField.from_mat(tmp_path / name, key)
    assert GridField.from_mat(tmp_path / "full.mat").values.shape == (20, 30)


def _segy(path, traces, ns=None, cut=0):
    """A minimal big-endian SEG-Y file: 3200-byte text, 400-byte binary header (samples per trace
    at byte 3220, format 5, IEEE float, at 3224), traces of a 240-byte header and ns floats."""
    traces = np.asarray(traces, ">f4")
    binary = bytearray(400)
    binary[20:22] = int(traces.shape[1] if ns is None else ns).to_bytes(2, "big")
    binary[24:26] = (5).to_bytes(2, "big")
    body = b"".join(bytes(240) + t.tobytes() for t in traces)
    data = b" " * 3200 + bytes(binary) + body
    path.write_bytes(data[: len(data) - cut])
    return path


@pytest.fixture
def fake_segyio(monkeypatch):
    """A stand-in for the optional segyio package: reads the traces of :func:`_segy`'s files,
    or raises as segyio does for a file it cannot read."""
    module = types.ModuleType("segyio")
    module.fail = None

    class _File:
        def __init__(self, path):
            with open(path, "rb") as f:
                raw = f.read()
            ns = int.from_bytes(raw[3220:3222], "big")
            body = np.frombuffer(raw[3600:], np.uint8).reshape(-1, 240 + 4 * ns)[:, 240:]
            self.trace = types.SimpleNamespace(raw=np.ascontiguousarray(body).view(">f4"))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def open_(path, mode, ignore_geometry=False):
        if module.fail is not None:
            raise module.fail
        return _File(path)

    module.open = open_
    monkeypatch.setitem(sys.modules, "segyio", module)
    return module


def test_segy_truncated_or_unreadable_is_named(tmp_path, fake_segyio):
    v = np.arange(24, dtype=float).reshape(4, 6) + 1500.0
    good = _segy(tmp_path / "good.sgy", v)
    np.testing.assert_array_equal(GridField.from_segy(good, spacing=(10.0, 5.0)).values, v)
    with pytest.raises(ValueError, match=r"cut\.sgy' is truncated or corrupt: .* whole number of traces "
                                         r"of 264 bytes"):
        GridField.from_segy(_segy(tmp_path / "cut.sgy", v, cut=7), spacing=(10.0, 5.0))
    (tmp_path / "short.sgy").write_bytes(b" " * 1000)
    with pytest.raises(ValueError, match="shorter than the 3,600-byte file header"):
        GridField.from_segy(tmp_path / "short.sgy", spacing=(10.0, 5.0))
    with pytest.raises(ValueError, match="gives 0 samples per trace"):
        GridField.from_segy(_segy(tmp_path / "zero.sgy", v, ns=0), spacing=(10.0, 5.0))
    fake_segyio.fail = RuntimeError("unable to find sorting")
    with pytest.raises(ValueError, match=r"good\.sgy' is not a readable SEG-Y file \(RuntimeError: unable"):
        GridField.from_segy(good, spacing=(10.0, 5.0))


def test_a_negative_velocity_from_a_file_names_the_file_and_the_point(tmp_path):
    """Was: "velocity must give finite values > 0 of shape (4096,) ..., got shape (4096,)"."""
    v = np.full((6, 6), 1500.0)
    v[3:, 3:] = -100.0
    np.save(tmp_path / "vel.npy", v)
    vel = GridField.from_npy(tmp_path / "vel.npy", spacing=0.2)
    with pytest.raises(ValueError, match=r"velocity \(GridField\(.*from '.*vel\.npy'\)\) must be finite and "
                                         r"> 0 at every point .*, got -?\d.* at x = \[") as info:
        hp.Problem(BOX, frequency=2.0, velocity=vel, bcs={"*": None})
    assert "got shape" not in str(info.value)


# -- 19: sources outside the domain or on its boundary ---------------------------------------------
def test_a_point_source_outside_the_domain_is_warned_about():
    with pytest.warns(UserWarning, match=r"PointSource at \[1.5, 0.5\] lies outside the domain \(Box"):
        hp.Problem(BOX, kappa=100.0, bcs={"*": hp.Dirichlet()}, source=hp.PointSource((1.5, 0.5)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hp.Problem(BOX, kappa=100.0, bcs={}, source=hp.PointSource((3.0, 0.5)), pml=hp.PML(0.5))
    words = [str(w.message) for w in caught]
    assert len(words) == 1 and "outside the domain (the PML's outer box" in words[0] and "in the PML" not in words[0]
    with pytest.warns(UserWarning, match="lies in the PML"):
        hp.Problem(BOX, kappa=100.0, bcs={}, source=hp.PointSource((1.2, 0.5)), pml=hp.PML(0.5))


@pytest.mark.parametrize("position", [(0.0, 0.0), (1.0, 0.3)])
def test_a_background_source_on_the_boundary_is_refused(position):
    """Was accepted; fd_solve then failed inside on the infinite boundary value."""
    with pytest.raises(ValueError, match="background: the source .* lies on the domain's boundary"):
        hp.Problem(BOX, kappa=100.0, bcs={"*": hp.Dirichlet()},
                   background=hp.sources.FreeSpaceSource(position, 10.0))
    scatterer = hp.geometry.BoxMinusBall(Box([-1.0, -1.0], [1.0, 1.0]), hp.geometry.Disk((0.0, 0.0), 0.25))
    with pytest.raises(ValueError, match="on the domain's boundary"):
        hp.Problem(scatterer, kappa=100.0, bcs={"*": hp.Dirichlet()},
                   background=hp.sources.FreeSpaceSource((0.25, 0.0), 10.0))


_CRASH_PROBE = """
import sys
from helmpinn.problems.media import GridField
for path in sys.argv[1:]:
    try:
        GridField.from_mat(path, "v")
    except ValueError as exc:
        print("ValueError:", exc, flush=True)
"""


def test_mat_files_that_crash_scipys_reader_are_refused_first(tmp_path):
    """A flipped byte in a .mat v5 file crashed the interpreter inside scipy.io.loadmat (its
    compiled reader indexes a table by the element's type unchecked): a type that is no MATLAB
    type, or the complex flag on an array without an imaginary part (the reader then takes the
    next variable's matrix as one). Run in a child process, so that a crash fails the test
    rather than ending the run."""
    import subprocess

    from scipy import io

    io.savemat(tmp_path / "good.mat", {"v": np.arange(30.0).reshape(5, 6) + 1, "name": "model"})
    raw = (tmp_path / "good.mat").read_bytes()
    at = raw.index(b"v\0\0\0") + 4          # the real part's tag, after the name's small element
    assert raw[at] == 9                      # miDOUBLE
    flags = 128 + 8 + 8                      # header, matrix tag, flags tag: the class byte
    assert raw[flags] == 6                   # mxDOUBLE_CLASS
    cases = {"type.mat": (at + 1, 65, "an element has type 16649, not a MATLAB data type"),
             "complex.mat": (flags + 1, 0x08, r"a matrix of class 6 \(complex\) lacks its 2 values")}
    for name, (i, value, _) in cases.items():
        bad = bytearray(raw)
        bad[i] = value
        (tmp_path / name).write_bytes(bytes(bad))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", _CRASH_PROBE, *(str(tmp_path / name) for name in cases)],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"the reader crashed (exit {out.returncode}) after: {out.stdout}"
    for name, (_, _, what) in cases.items():
        assert re.search(rf"ValueError: GridField.from_mat: '.*{name}' is not a readable MATLAB file, "
                         rf"truncated or corrupt: {what}", out.stdout), out.stdout + out.stderr
