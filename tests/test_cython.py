"""Cython code can cimport helmpinn's C++ API (python/helmpinn/core.pxd) and call the core with
no Python in between. This compiles a small Cython extension in a temporary directory, links it
with the C++ library and checks its loss, gradient and a short Adam run against the Python API,
and calls the CUDA runtime declarations of runtime.hpp: a default PointerInfo and an empty
DeviceBuffer (any build); every device function raising RuntimeError naming itself (a library
built without CUDA); and on a GPU (a library with CUDA) a DeviceBuffer's round trip through
copy_to_device / copy_to_host, pointer_info, device_for_pointer, DeviceScope and stream_wait.

Where the C++ headers and library come from: the installed package itself when it ships them
(a wheel: helmpinn/include, helmpinn/lib/libhelmpinn.a), otherwise a CMake build and install of
this source tree (shared with test_cpp.py, once per session).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import helmpinn

SPEC = (2, 4, 8, 2)
BATCH = 16  # smaller than every term below: several chunks

PYX = textwrap.dedent('''
    # distutils: language = c++
    # cython: language_level=3, boundscheck=False, wraparound=False
    from libcpp.vector cimport vector
    from helmpinn.core cimport (ModelSpec, Workspace, LossInputs, LossBreakdown, adam_step,
                                version, Device, has_cuda, cuda_device_count, current_device,
                                DeviceScope, MemoryKind, PointerInfo, pointer_info,
                                device_for_pointer, DeviceBuffer, copy_to_device, copy_to_host,
                                stream_wait, kPde, kData, kBc)

    def core_version():
        return version().decode()

    # ---- the CUDA runtime (runtime.hpp) ----------------------------------------------------

    def library_cuda():
        """(has_cuda, cuda_device_count) of the C++ library this extension links."""
        return has_cuda(), cuda_device_count()

    cdef str kind_name(MemoryKind kind):
        if kind == MemoryKind.host:
            return "host"
        if kind == MemoryKind.pinned_host:
            return "pinned_host"
        if kind == MemoryKind.device:
            return "device"
        return "managed"

    def runtime_defaults():
        """A default PointerInfo and an empty DeviceBuffer: no GPU needed."""
        cdef PointerInfo info
        cdef DeviceBuffer buf
        buf.reset()
        return ((kind_name(info.kind), info.device, info.on_device()),
                (buf.data() == NULL, buf.bytes(), buf.device(), buf.empty()))

    def runtime_call(str name, int device):
        """One runtime function, on host memory or `device`; what it returns."""
        cdef double x[4]
        cdef DeviceScope* scope
        cdef DeviceBuffer* buf
        cdef int n
        x[0] = 1.0
        if name == "current_device":
            with nogil:
                n = current_device()
            return n
        if name == "DeviceScope":
            scope = new DeviceScope(device)
            n = scope.previous()
            del scope
            return n
        if name == "pointer_info":
            return kind_name(pointer_info(x).kind), pointer_info(x).device
        if name == "device_for_pointer":
            return device_for_pointer(x)
        if name == "DeviceBuffer":
            buf = new DeviceBuffer(64, device)
            n = buf.bytes()
            del buf
            return n
        if name == "copy_to_device":   # 8 bytes to NULL: refused before any copy without CUDA
            copy_to_device(NULL, x, 8, device)
        elif name == "copy_to_host":
            copy_to_host(x, NULL, 8, device)
        elif name == "stream_wait":    # two different streams
            stream_wait(<void*>2, <void*>3, device)
        else:
            raise ValueError(name)

    def device_roundtrip(const double[::1] src, int device):
        """src copied into a DeviceBuffer on `device` and back (the default stream ordered after
        itself in between); with where the buffer's memory is and the current device in a
        DeviceScope of `device`."""
        cdef size_t n = src.shape[0]
        cdef vector[double] back = vector[double](n, 0.0)
        cdef DeviceBuffer* buf = new DeviceBuffer(n * sizeof(double), device)
        cdef DeviceScope* scope = NULL
        cdef PointerInfo info
        cdef int owner, current
        try:
            with nogil:
                copy_to_device(buf.data(), &src[0], n * sizeof(double), device)
                stream_wait(NULL, NULL, device)
                copy_to_host(back.data(), buf.data(), n * sizeof(double), device)
                info = pointer_info(buf.data())
                owner = device_for_pointer(buf.data())
            scope = new DeviceScope(device)
            current = current_device()
            return (list(back), kind_name(info.kind), info.device, info.on_device(), owner,
                    current, buf.bytes(), buf.device())
        finally:
            del scope
            del buf

    cdef ModelSpec make_spec(tuple s) except *:
        cdef ModelSpec spec
        spec.in_dim, spec.ff_dim, spec.hidden_dim, spec.num_hidden_layers = s
        return spec

    cdef class Solver:
        """A float64 helmpinn Workspace owned by a Cython object."""
        cdef Workspace[double]* ws
        cdef LossInputs[double] inp

        def __cinit__(self, tuple spec, size_t batch):
            self.ws = new Workspace[double](make_spec(spec), batch)   # except +: ValueError

        def __dealloc__(self):
            del self.ws

        @property
        def num_params(self):
            return self.ws.spec().num_params()

        def set_terms(self, const double[:, ::1] x_pde, const double[::1] kappa,
                      const double[:, ::1] f, const double[:, ::1] x_data,
                      const double[:, ::1] y, const double[:, ::1] x_bc,
                      const double[:, ::1] n_bc, const double[:, ::1] alpha_bc,
                      const double[:, ::1] g_bc, double w_pde, double w_data, double w_bc):
            # The caller keeps the arrays alive while this Solver uses them.
            self.inp.x_pde = &x_pde[0, 0]
            self.inp.num_pde = x_pde.shape[0]
            self.inp.kappa = &kappa[0]
            self.inp.f = &f[0, 0]
            self.inp.x_data = &x_data[0, 0]
            self.inp.num_data = x_data.shape[0]
            self.inp.y = &y[0, 0]
            self.inp.x_bc = &x_bc[0, 0]
            self.inp.num_bc = x_bc.shape[0]
            self.inp.normal_bc = &n_bc[0, 0]
            self.inp.alpha_bc = &alpha_bc[0, 0]
            self.inp.g_bc = &g_bc[0, 0]
            self.inp.w_pde = w_pde
            self.inp.w_data = w_data
            self.inp.w_bc = w_bc

        def value_and_grad(self, const double[::1] theta, double[::1] grad):
            cdef LossBreakdown lb
            with nogil:
                lb = self.ws.value_and_grad(&theta[0], &grad[0], self.inp)
            return lb.total, lb.mean[kPde], lb.mean[kData], lb.mean[kBc]

        def train(self, double[::1] theta, int steps, double lr):
            """`steps` Adam steps entirely in C++ (no GIL); returns the last loss."""
            cdef size_t P = theta.shape[0]
            cdef vector[double] grad = vector[double](P, 0.0)
            cdef vector[double] m = vector[double](P, 0.0)
            cdef vector[double] v = vector[double](P, 0.0)
            cdef LossBreakdown lb
            cdef long step
            with nogil:
                for step in range(1, steps + 1):
                    lb = self.ws.value_and_grad(&theta[0], grad.data(), self.inp)
                    adam_step[double](&theta[0], grad.data(), m.data(), v.data(), P, step, lr,
                                      0.9, 0.999, 1e-8, 0.0, Device.cpu, NULL)
            return lb.total
''')


def _flags(cmake_dir: Path, libdir: Path, include: Path) -> dict:
    """setuptools Extension arguments from the installed helmpinn-flags.json."""
    info = json.loads((cmake_dir / "helmpinn-flags.json").read_text())
    return {"include_dirs": [str(include)],
            "extra_objects": [str(libdir / info["library"])],
            "extra_compile_args": [*info["compile_args"], "-O2"],
            "extra_link_args": list(info["link_args"])}


def _from_package() -> tuple[dict, str] | None:
    """The C++ package inside the installed Python package (a wheel), if it ships one."""
    pkg = Path(helmpinn.__file__).resolve().parent
    cmake_dir = pkg / "lib" / "cmake" / "helmpinn"
    if not (pkg / "include" / "helmpinn" / "helmpinn.hpp").is_file() or \
            not (cmake_dir / "helmpinn-flags.json").is_file():
        return None
    if hasattr(helmpinn, "get_build_flags"):   # the documented way (README, "Use from Cython")
        flags = {k: v for k, v in helmpinn.get_build_flags().items() if k != "language"}
        flags["extra_compile_args"] = [*flags["extra_compile_args"], "-O2"]
    else:
        flags = _flags(cmake_dir, pkg / "lib", pkg / "include")
    return flags, f"the installed package ({pkg})"


def _from_source(tmp_path_factory) -> tuple[dict, str]:
    """A CMake build and install of this source tree (shared with test_cpp.py)."""
    import test_cpp  # noqa: PLC0415  (tests/ is on sys.path: conftest.py)
    reason = test_cpp._why_not()
    if reason:
        pytest.skip(f"the package ships no C++ library and it cannot be built: {reason}")
    base = tmp_path_factory.getbasetemp() / "helmpinn-cxx"
    base.mkdir(exist_ok=True)
    prefix = test_cpp.build_and_install(base)["prefix"]
    cfg = sorted(prefix.glob("lib*/cmake/helmpinn/helmpinn-flags.json"))
    assert cfg, f"helmpinn-flags.json is not installed under {prefix}"
    cmake_dir = cfg[0].parent
    return (_flags(cmake_dir, cmake_dir.parent.parent, prefix / "include"),
            f"a CMake install of the source tree ({prefix})")


@pytest.fixture(scope="session")
def cython_module(tmp_path_factory):
    pytest.importorskip("Cython", minversion="3.0", reason="Cython >= 3 is not installed")
    pytest.importorskip("setuptools", reason="setuptools is not installed")
    flags, origin = _from_package() or _from_source(tmp_path_factory)
    pxd_root = Path(helmpinn.__file__).resolve().parent.parent
    assert (pxd_root / "helmpinn" / "core.pxd").is_file(), "helmpinn/core.pxd is not installed"

    work = tmp_path_factory.mktemp("cython")
    (work / "hp_cy.pyx").write_text(PYX)
    (work / "setup.py").write_text(textwrap.dedent(f'''
        from setuptools import Extension, setup
        from Cython.Build import cythonize
        ext = Extension("hp_cy", ["hp_cy.pyx"], language="c++", **{flags!r})
        setup(name="hp_cy", ext_modules=cythonize([ext], include_path=[{str(pxd_root)!r}],
                                                   quiet=True))
    '''))
    proc = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=work,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if proc.returncode != 0:
        pytest.fail(f"building the Cython extension against {origin} failed:\n{proc.stdout}",
                    pytrace=False)
    built = sorted(work.glob("hp_cy*.so")) + sorted(work.glob("hp_cy*.pyd"))
    assert built, proc.stdout
    spec = importlib.util.spec_from_file_location("hp_cy", built[0])
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except ImportError as e:
        pytest.fail(f"the Cython extension built against {origin} does not load: {e}\n"
                    f"flags: {flags}", pytrace=False)
    return mod


def _terms(rng):
    d = SPEC[0]
    nrm = rng.normal(size=(29, d))
    return dict(
        x_pde=rng.uniform(-1, 1, (41, d)), kappa=rng.uniform(1, 10, 41),
        f=rng.normal(size=(41, 2)),
        x_data=rng.uniform(-1, 1, (23, d)), y=rng.normal(size=(23, 2)),
        x_bc=rng.uniform(-1, 1, (29, d)), n_bc=nrm / np.linalg.norm(nrm, axis=1, keepdims=True),
        alpha_bc=rng.normal(size=(29, 2)), g_bc=rng.normal(size=(29, 2)),
        w_pde=0.5, w_data=2.0, w_bc=0.75)


def _solver(mod, terms):
    s = mod.Solver(SPEC, BATCH)
    s.set_terms(*(terms[k] for k in ("x_pde", "kappa", "f", "x_data", "y", "x_bc", "n_bc",
                                     "alpha_bc", "g_bc", "w_pde", "w_data", "w_bc")))
    return s


def test_cython_version(cython_module):
    assert cython_module.core_version() == helmpinn.__version__


def test_cython_loss_and_grad_match_python(cython_module, rng):
    terms = _terms(rng)
    spec = helmpinn.ModelSpec(*SPEC)
    theta = helmpinn.init_params(spec, "float64", seed=3)
    s = _solver(cython_module, terms)
    assert s.num_params == spec.num_params
    g_cy = np.full(spec.num_params, np.nan)
    total, pde, data, bc = s.value_and_grad(theta, g_cy)

    ws = helmpinn.Workspace(spec, BATCH, dtype="float64")
    g_py = np.full(spec.num_params, np.nan)
    loss = ws.value_and_grad(theta, g_py, **terms)
    np.testing.assert_allclose(total, loss, rtol=1e-12)
    last = ws.last_loss
    np.testing.assert_allclose([pde, data, bc], [last["pde"], last["data"], last["bc"]],
                               rtol=1e-12)
    np.testing.assert_allclose(g_cy, g_py, rtol=1e-10, atol=1e-12 * np.abs(g_py).max())
    assert total > 0 and np.abs(g_cy).max() > 0


def test_cython_training_loop_matches_python(cython_module, rng):
    terms = _terms(rng)
    spec = helmpinn.ModelSpec(*SPEC)
    theta0 = helmpinn.init_params(spec, "float64", seed=5)
    steps, lr = 25, 1e-2

    th_cy = theta0.copy()
    last_cy = _solver(cython_module, terms).train(th_cy, steps, lr)

    ws = helmpinn.Workspace(spec, BATCH, dtype="float64")
    th_py = theta0.copy()
    g, m, v = (np.zeros_like(th_py) for _ in range(3))
    for step in range(1, steps + 1):
        last_py = ws.value_and_grad(th_py, g, **terms)
        helmpinn.adam_step(th_py, g, m, v, step, lr)
    np.testing.assert_allclose(last_cy, last_py, rtol=1e-9)
    np.testing.assert_allclose(th_cy, th_py, rtol=1e-9, atol=1e-12)
    assert not np.array_equal(th_cy, theta0)


def test_cython_errors_become_python_exceptions(cython_module):
    with pytest.raises(ValueError, match="in_dim"):
        cython_module.Solver((4, 4, 8, 2), 16)
    with pytest.raises(ValueError, match="batch_size"):
        cython_module.Solver(SPEC, 0)


# ------------------------------------------------------------------ the CUDA runtime (runtime.hpp)

RUNTIME = ("current_device", "DeviceScope", "pointer_info", "device_for_pointer", "DeviceBuffer",
           "copy_to_device", "copy_to_host", "stream_wait")


def test_cython_runtime_values_without_a_gpu(cython_module):
    info, buf = cython_module.runtime_defaults()
    assert info == ("host", -1, False)
    assert buf == (True, 0, 0, True)


def test_cython_runtime_without_cuda(cython_module):
    """The linked library has no CUDA: every device function raises RuntimeError naming itself."""
    if cython_module.library_cuda()[0]:
        pytest.skip("the C++ library this extension links was built with CUDA")
    assert cython_module.library_cuda() == (False, 0)
    for name in RUNTIME:
        with pytest.raises(RuntimeError, match=f"^{name}: helmpinn was built without CUDA support$"):
            cython_module.runtime_call(name, 0)


def test_cython_runtime_on_gpu(gpu, cython_module, rng):
    has, count = cython_module.library_cuda()
    if not has or count == 0:
        pytest.skip("the C++ library this extension links was built without CUDA"
                    if not has else "the C++ library this extension links sees no CUDA device")
    src = rng.normal(size=9)
    back, kind, dev, on_device, owner, current, nbytes, buf_dev = \
        cython_module.device_roundtrip(src, 0)
    np.testing.assert_array_equal(back, src)
    assert (kind, dev, on_device, owner, current) == ("device", 0, True, 0, 0)
    assert (nbytes, buf_dev) == (9 * 8, 0)
    assert cython_module.runtime_call("pointer_info", 0) == ("host", -1)
    assert cython_module.runtime_call("device_for_pointer", 0) == -1
    assert cython_module.runtime_call("DeviceBuffer", 0) == 64
    assert isinstance(cython_module.runtime_call("DeviceScope", 0), int)
    assert cython_module.runtime_call("current_device", 0) == 0
