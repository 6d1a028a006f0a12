"""Models, batches, Adam and the Trainer on device="cuda".

Any machine: device names are checked (ValueError / TypeError naming the argument); where CUDA
cannot be used (a build without CUDA, or no GPU), every device="cuda" entry point (Model,
Model.create, Model.load, Model.to, Batch.to_device, TrainingSet.to_batch, Trainer) raises the
RuntimeError a CUDA Workspace raises, before any work: nothing initialised, read, converted or
moved; device="cpu" behaves as before (params_host is a copy, set_params writes in place); a
foreign device array (CuPy, PyTorch) as parameters is refused, and a Batch holding one cannot
be copied to the host.

With a GPU: a model's parameters are a DeviceArray; predict, save/load, to, copy and astype
agree with the CPU model; Batch.to_device holds the same numbers and gives the CPU's loss and
gradient; a float64 Trainer on cuda follows the CPU Trainer step by step (losses and parameters
to 1e-10 relative, with a redraw of points in the run); steps make no host copy of parameters,
gradient, Adam moments or points (the copies of a fit do not grow with its steps, and those
arrays are the same objects at every step); a NaN restores the last good state; a checkpointed
and resumed run equals an uninterrupted one; polish (L-BFGS on the host) gives the CPU's result;
fit_lm and comm= are refused with NotImplementedError.
GPU tests skip with the reason without a usable GPU, and FAIL instead with HELMPINN_REQUIRE_GPU=1.
"""
from __future__ import annotations

import re
import sys

import numpy as np
import pytest

import helmpinn
from helmpinn import Batch, DeviceArray, Model, Trainer, Workspace
from helmpinn.optim import Adam
from helmpinn.problems.registry import get_problem

from conftest import no_gpu_reason



@pytest.fixture
def no_gpu():
    """For the tests of what happens where CUDA cannot be used: skip where it can."""
    if no_gpu_reason() is None:
        pytest.skip("a GPU is usable here; the device path is tested by the GPU tests")


def _workspace_error() -> str:
    with pytest.raises(RuntimeError) as info:
        Workspace(helmpinn.ModelSpec(1, 4, 8, 1), 16, "float64", device="cuda")
    return str(info.value)


def _same_error(ours: str, workspace: str, caller: str) -> None:
    """Our message is the Workspace's, with the caller's name in place of 'Workspace'."""
    if "built without CUDA support" in workspace:
        assert ours == workspace
    else:   # "Workspace(device='cuda'): CUDA device 0 is not available: <why>"
        assert workspace.startswith("Workspace(device='cuda'): CUDA device 0 is not available: ")
        assert ours == caller + workspace[len("Workspace"):], (ours, workspace)


def small_model(dim: int = 1, dtype: str = "float64", **kw) -> Model:
    return Model.create(dim, 8, 16, 2, dtype=dtype, seed=3, fourier_sigma=1.0, **kw)


class _CaiArray:
    """An object that presents itself as CUDA memory (a CuPy / Numba stand-in for argument
    checks only: no call that reads memory is made with it)."""

    def __init__(self, shape, typestr="<f8"):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (0, False),
                                         "version": 3, "strides": None}
        self.shape = shape


# ------------------------------------------------------------------ any machine

@pytest.mark.parametrize("bad, exc, match", [
    ("gpu", ValueError, "device: expected 'cpu' or 'cuda', got 'gpu'"),
    ("cuda:x", ValueError, "device: expected 'cuda:N'"),
    ("cuda:-1", ValueError, "device: expected 'cuda:N'"),
    (0, TypeError, "device: expected 'cpu', 'cuda' or 'cuda:N', got int"),
])
def test_device_names_are_checked(bad, exc, match):
    ts = get_problem("plane1d", k=4.0).sample(8, 2, rng=0)
    for call in (lambda: Model.create(1, device=bad), lambda: small_model().to(bad),
                 lambda: ts.to_batch("float64", device=bad),
                 lambda: ts.to_batch("float64").to_device(bad),
                 lambda: Trainer(get_problem("plane1d", k=4.0), small_model(), device=bad, progress=False)):
        with pytest.raises(exc, match=match):
            call()


@pytest.mark.parametrize("bad", ["cuda:x", "cuda:", "cuda:-1", "cuda: 1", "cuda:1x",
                                 "cuda:99999999999", "cuda:2147483648", "cuda:\u00b2"])
def test_device_numbers_have_one_parser_with_one_error(bad):
    """Device names have one parser, the core's: Workspace (which parsed "cuda:N" with a bare
    std::stoi: "cuda:x" gave ValueError('stoi'), "cuda:99999999999" IndexError('stoi'), and
    "cuda: 1" or "cuda:1x" were device 1) and the Python layer (whose int() took "cuda:\u00b2"
    for a number and failed on it) refuse the same names with the same ValueError."""
    match = re.escape(f"device: expected 'cuda:N' with N a device number from 0 to 2147483647, "
                      f"got '{bad}'")
    with pytest.raises(ValueError, match=match):
        Workspace(helmpinn.ModelSpec(1, 4, 8, 1), 16, "float64", device=bad)
    with pytest.raises(ValueError, match=match):
        Model.create(1, device=bad)
    # ... and read the good ones alike
    for name, parsed in (("cpu", ("cpu", -1)), ("cuda", ("cuda", 0)), ("cuda:07", ("cuda", 7)),
                         ("cuda:2147483647", ("cuda", 2147483647))):
        assert helmpinn._device.parse(name) == parsed


def test_cuda_unavailable_raises_the_workspace_error_before_any_work(no_gpu, tmp_path, monkeypatch):
    expected = _workspace_error()
    model = small_model()
    before = model.params.copy()
    model.save(tmp_path / "m.npz")

    def no_init(*a, **k):
        raise AssertionError("init_params ran before the device check")

    monkeypatch.setattr(sys.modules["helmpinn.models.model"], "init_params", no_init)
    cases = {
        "Model.create": lambda: Model.create(1, device="cuda"),
        "Model": lambda: Model(model.spec, model.params, device="cuda"),
        "Model.load": lambda: Model.load(tmp_path / "missing.npz", device="cuda"),  # not read
        "Model.to": lambda: model.to("cuda"),
        "Batch.to_device": lambda: Batch(x_pde=np.zeros((3, 1)), kappa=1.0).to_device("cuda"),
        "Trainer": lambda: Trainer(get_problem("plane1d", k=4.0), model, device="cuda", progress=False),
    }
    for caller, call in cases.items():
        with pytest.raises(RuntimeError) as info:
            call()
        _same_error(str(info.value), expected, caller)
    ts = get_problem("plane1d", k=4.0).sample(8, 2, rng=0)
    monkeypatch.setattr(sys.modules["helmpinn.problems.training_set"], "Batch", no_init)   # nothing converted either
    with pytest.raises(RuntimeError) as info:
        ts.to_batch("float64", device="cuda")
    _same_error(str(info.value), expected, "TrainingSet.to_batch")
    # the model was not moved, nor changed
    assert model.device == "cpu" and isinstance(model.params, np.ndarray)
    assert model.params.tobytes() == before.tobytes()


def test_cpu_device_is_the_default_and_unchanged():
    model = small_model()
    assert model.device == "cpu" and isinstance(model.params, np.ndarray)
    same = small_model(device="cpu")
    assert same.params.tobytes() == model.params.tobytes() and "device" not in repr(model)
    assert model.to("cpu") is model
    host = model.params_host()
    assert host.tobytes() == model.params.tobytes() and host is not model.params
    host[0] += 1.0                                     # a copy: the model is unchanged
    assert model.params[0] != host[0]
    buffer = model.params
    model.set_params(host)                             # in place, same buffer
    assert model.params is buffer and model.params[0] == host[0]
    model.set_params(host.astype(np.float32))          # converted to the model's dtype
    assert model.params.dtype == np.float64
    with pytest.raises(ValueError, match=r"set_params: expected shape \(%d,\)" % model.num_params):
        model.set_params(host[:-1])
    assert set(model.views) >= {"B", "W0", "b0"}
    assert Adam(model.params).device == "cpu"

    ts = get_problem("plane1d", k=4.0).sample(16, 2, rng=0)
    batch = ts.to_batch("float64", device="cpu")
    assert batch.device == "cpu" and batch.to_host() is batch and batch.to_device("cpu") is batch
    tr = Trainer(get_problem("plane1d", k=4.0), model, device="cpu", progress=False, eval_every=0,
                 pde_points=16)
    assert tr.device == "cpu" and tr.model is model and isinstance(tr.grad, np.ndarray)
    tr.fit(2)
    assert tr.batch.device == "cpu" and np.all(np.isfinite(model.params))


def test_foreign_device_arrays_are_refused_where_helmpinn_would_copy_them():
    spec = small_model().spec
    fake = _CaiArray((spec.num_params,))
    with pytest.raises(TypeError, match="params: expected a NumPy array or a helmpinn.DeviceArray"):
        Model(spec, fake)
    b = Batch(x_pde=_CaiArray((4, 1)), kappa=1.0, dtype="float64")
    assert b.device == "cuda" and b["x_pde"] is b.x_pde       # kept as given, for the core
    with pytest.raises(TypeError, match="x_pde: a .*_CaiArray device array cannot be copied"):
        b.to_host()


# ------------------------------------------------------------------ with a GPU

def _rel(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def test_model_on_gpu(gpu, tmp_path):
    cpu = small_model(2)
    dev = small_model(2, device="cuda")
    assert isinstance(dev.params, DeviceArray) and dev.device == "cuda:0" and "cuda:0" in repr(dev)
    assert dev.params_host().tobytes() == cpu.params.tobytes()
    x = np.random.default_rng(0).random((300, 2))
    assert _rel(dev.predict(x, batch_size=128), cpu.predict(x)) < 1e-12
    for a, b in zip(dev.predict_derivatives(x), cpu.predict_derivatives(x)):
        assert _rel(a, b) < 1e-12
    with pytest.raises(RuntimeError, match="parameters are on cuda:0"):
        dev.views
    # save copies to the host; load puts it where asked
    dev.optimizer_state = {"m": DeviceArray.from_host(np.ones(dev.num_params)), "step": 4}
    dev.save(tmp_path / "m.npz")
    back = Model.load(tmp_path / "m.npz")
    assert back.device == "cpu" and back.params.tobytes() == cpu.params.tobytes()
    assert np.all(back.optimizer_state["m"] == 1.0) and back.optimizer_state["step"] == 4
    again = Model.load(tmp_path / "m.npz", device="cuda")
    assert again.device == "cuda:0" and again.params_host().tobytes() == cpu.params.tobytes()
    # copy is independent; set_params writes in place; to() moves in place
    c = dev.copy()
    buffer = dev.params
    dev.set_params(np.zeros(dev.num_params))
    assert dev.params is buffer and not dev.params_host().any()
    assert c.params_host().tobytes() == cpu.params.tobytes()
    assert c.to("cpu") is c and c.device == "cpu" and c.params.tobytes() == cpu.params.tobytes()
    assert c.to("cuda") is c and c.device == "cuda:0" and c.params_host().tobytes() == cpu.params.tobytes()
    f32 = c.astype("float32")
    assert f32.device == "cuda:0" and f32.dtype == np.float32
    assert f32.params_host().tobytes() == cpu.params.astype(np.float32).tobytes()
    assert Model(cpu.spec, c.params).params is c.params           # a DeviceArray is taken as is


def test_batch_to_device_gives_the_cpu_loss(gpu):
    problem = get_problem("dirichlet2d")
    ts = problem.sample(200, 40, rng=1)
    host = ts.to_batch("float64")
    dev = ts.to_batch("float64", device="cuda")
    assert dev.device == "cuda:0" and dev.sizes == host.sizes and dev.dtype == host.dtype
    for k, v in host.items():
        if isinstance(v, np.ndarray):
            assert isinstance(dev[k], DeviceArray) and dev[k].copy_to_host().tobytes() == v.tobytes()
        else:
            assert dev[k] == v
    assert dev.to_device("cuda") is dev
    back = dev.to_host()
    assert all(back[k].tobytes() == v.tobytes() for k, v in host.items() if isinstance(v, np.ndarray))
    model = small_model(2)
    ws_c = Workspace(model.spec, 64, "float64")
    ws_g = Workspace(model.spec, 64, "float64", device="cuda")
    g_c = np.zeros(model.num_params)
    g_g = DeviceArray.from_host(np.zeros(model.num_params))
    kw = dict(w_pde=0.3, w_bc=2.0, breakdown=True)
    lc = ws_c.value_and_grad(model.params, g_c, batch=host, **kw)
    lg = ws_g.value_and_grad(DeviceArray.from_host(model.params), g_g, batch=dev, **kw)
    assert abs(lg.total - lc.total) <= 1e-12 * abs(lc.total)
    assert _rel(g_g.copy_to_host(), g_c) < 1e-11


def _pair(problem_name="plane1d", **kw):
    problem = get_problem(problem_name, k=6.0) if problem_name == "plane1d" else get_problem(problem_name)
    dim = problem.dim
    opts = dict(lr=1e-2, pde_points=96, bc_points=2 if dim == 1 else 32, resample_every=5,
                eval_every=0, progress=False, seed=7, batch_size=64)
    opts.update(kw)
    cpu = Trainer(problem, small_model(dim), **opts)
    dev = Trainer(problem, small_model(dim), device="cuda", **opts)
    return cpu, dev


@pytest.mark.parametrize("problem", ["plane1d", "dirichlet2d"])
def test_gpu_trainer_follows_the_cpu_trainer(gpu, problem):
    cpu, dev = _pair(problem)
    assert dev.device == "cuda:0" and isinstance(dev.grad, DeviceArray)
    cpu.fit(12)
    dev.fit(12)
    assert isinstance(dev.batch["x_pde"], DeviceArray)
    assert isinstance(dev.optimizer.m, DeviceArray) and isinstance(dev.optimizer.v, DeviceArray)
    for term in ("loss", "pde", "data", "bc"):
        a, b = getattr(dev.history, term), getattr(cpu.history, term)
        assert len(a) == len(b) == 12
        assert np.allclose(a, b, rtol=1e-10, atol=1e-300), term
    assert _rel(dev.model.params_host(), cpu.model.params) < 1e-10
    assert _rel(dev.optimizer.m.copy_to_host(), cpu.optimizer.m) < 1e-9
    assert dev.evaluate() == pytest.approx(cpu.evaluate(), rel=1e-9)


class _Transfers:
    """Counts every host <-> device copy made through helmpinn.DeviceArray."""

    def __init__(self, monkeypatch):
        self.counts = {"from_host": 0, "copy_to_host": 0, "copy_from_host": 0}
        from_host = DeviceArray.from_host
        to_host = DeviceArray.copy_to_host
        write = DeviceArray.copy_from_host

        def counted_from_host(array, device=0):
            self.counts["from_host"] += 1
            return from_host(array, device)

        def counted_to_host(a):
            self.counts["copy_to_host"] += 1
            return to_host(a)

        def counted_write(a, array):
            self.counts["copy_from_host"] += 1
            return write(a, array)

        monkeypatch.setattr(DeviceArray, "from_host", staticmethod(counted_from_host))
        monkeypatch.setattr(DeviceArray, "copy_to_host", counted_to_host)
        monkeypatch.setattr(DeviceArray, "copy_from_host", counted_write)

    def during(self, fn) -> dict[str, int]:
        before = dict(self.counts)
        fn()
        return {k: self.counts[k] - before[k] for k in self.counts}


def test_gpu_steps_copy_nothing_but_the_loss(gpu, monkeypatch):
    seen = []

    def record(tr, step):
        seen.append((id(tr.model.params), id(tr.grad), id(tr.optimizer.m), id(tr.optimizer.v),
                     id(tr.batch), id(tr.batch["x_pde"])))

    _, dev = _pair(resample_every=0, callbacks=[record])
    dev.fit(1)                                   # the draw, the optimiser's m and v
    transfers = _Transfers(monkeypatch)
    short = transfers.during(lambda: dev.fit(2))
    long = transfers.during(lambda: dev.fit(10))
    # A fit copies the parameters and moments to the host a fixed number of times, whatever its
    # length: the finiteness checks at its start and end, the last good state (parameters, m, v)
    # at its start, and the error on the test points at its end (their one upload, and u back).
    assert short == long, (short, long)
    assert long == {"from_host": 1, "copy_to_host": 6, "copy_from_host": 0}, long
    assert len(seen) == 13 and len(set(seen)) == 1, "the same device arrays at every step"
    # a redraw copies the points once
    one = transfers.during(dev.resample)
    assert one["from_host"] == sum(isinstance(v, np.ndarray) for v in dev.training_set.to_batch("float64").values())
    assert one["copy_to_host"] == 0


def test_gpu_nan_restores_the_last_good_state(gpu, tmp_path):
    def inject(tr, step):
        if step == 7:
            bad = tr.model.params_host()
            bad[5] = np.nan
            tr.model.set_params(bad)

    results = []
    for device in ("cpu", "cuda"):
        problem = get_problem("plane1d", k=6.0)
        tr = Trainer(problem, small_model(1), device=device, lr=1e-2, pde_points=64, eval_every=0,
                     progress=False, seed=2, checkpoint_every=5,
                     checkpoint_path=tmp_path / f"{device}.npz", callbacks=[inject])
        tr.fit(20)
        assert tr.diverged and "non-finite loss" in tr.stop_reason and "step 8" in tr.stop_reason
        assert tr.step == 5 and tr.optimizer.step_count == 5
        ckpt = Model.load(tmp_path / f"{device}.npz")
        assert ckpt.params.tobytes() == tr.model.params_host().tobytes()
        assert ckpt.optimizer_state["m"].tobytes() == np.asarray(
            tr.optimizer.m.copy_to_host() if device == "cuda" else tr.optimizer.m).tobytes()
        tr.callbacks.clear()
        tr.fit(3)                                    # goes on from the restored state
        assert tr.step == 8 and not tr.diverged
        results.append(tr.model.params_host())
    assert _rel(results[1], results[0]) < 1e-10


def test_gpu_checkpoint_resume_equals_one_run(gpu, tmp_path):
    problem = get_problem("plane1d", k=6.0)
    opts = dict(lr=1e-2, schedule="constant", pde_points=64, eval_every=0, progress=False, seed=4,
                resample_every=4)   # a constant lr: a cosine would span 6 steps in the first run
    whole = Trainer(problem, small_model(1), device="cuda", **opts)
    whole.fit(10)
    first = Trainer(problem, small_model(1), device="cuda", checkpoint_every=6,
                    checkpoint_path=tmp_path / "c.npz", **opts)
    first.fit(6)
    resumed = Model.load(tmp_path / "c.npz", device="cuda")
    assert resumed.device == "cuda:0" and isinstance(resumed.optimizer_state["m"], np.ndarray)
    second = Trainer(problem, resumed, **opts)
    assert second.device == "cuda:0"
    second.fit(4)
    assert second.step == 10 and second.optimizer.step_count == 10
    assert isinstance(second.optimizer.m, DeviceArray)
    assert second.model.params_host().tobytes() == whole.model.params_host().tobytes()


def test_gpu_polish_runs_on_the_host_and_gives_the_cpu_result(gpu):
    cpu, dev = _pair()
    a = cpu.polish(15)
    b = dev.polish(15)
    assert dev.model.device == "cuda:0" and isinstance(dev.model.params, DeviceArray)
    assert a["loss_after"] == b["loss_after"] < a["loss_before"]
    assert dev.model.params_host().tobytes() == cpu.model.params.tobytes()


def test_gpu_refuses_lm_and_comm(gpu):
    _, dev = _pair()
    with pytest.raises(NotImplementedError, match="fit_lm: Levenberg-Marquardt runs on the CPU"):
        dev.fit_lm(2)
    with pytest.raises(NotImplementedError, match="data-parallel training runs on the CPU"):
        Trainer(get_problem("plane1d", k=6.0), small_model(1, device="cuda"), comm=object(),
                progress=False)
    # a model moved under a running Trainer is named, not trained on the wrong device
    dev.model.to("cpu")
    with pytest.raises(RuntimeError, match="the model moved to cpu after this Trainer was made on cuda:0"):
        dev.fit(1)
