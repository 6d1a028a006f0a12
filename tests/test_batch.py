"""helmpinn.Batch: one object for a loss's inputs, converted once, accepted by every loss-level
Workspace operation in place of the array keywords, and passed through unchanged by the Trainer,
L-BFGS and LM; the point counts are pde_points / bc_points (n_bc is the boundary normals)."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import helmpinn as hp
from helmpinn.problems.batch import Batch
from helmpinn.cli import main
from helmpinn.models.model import Model
from helmpinn.problems import TrainingSet


def _complex_inputs(rng, d=2, n=9, m=5, q=4):
    nrm = rng.normal(size=(q, d))
    c = lambda k: rng.normal(size=k) + 1j * rng.normal(size=k)  # noqa: E731
    return dict(x_pde=rng.uniform(-1, 1, (n, d)), kappa=rng.uniform(1, 5, n), f=c(n),
                x_data=rng.uniform(-1, 1, (m, d)), y=c(m),
                x_bc=rng.uniform(-1, 1, (q, d)), n_bc=nrm / np.linalg.norm(nrm, axis=1, keepdims=True),
                alpha_bc=c(q), g_bc=c(q))


def _pairs(z):
    return np.stack([z.real, z.imag], axis=-1)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_batch_converts_once_to_readonly_contiguous_arrays(rng, dtype):
    kw = _complex_inputs(rng)
    kw["x_pde"] = np.asfortranarray(kw["x_pde"])
    b = Batch(**kw, dtype=dtype)
    assert b.dtype == np.dtype(dtype)
    for key in ("x_pde", "kappa", "f", "x_data", "y", "x_bc", "n_bc", "alpha_bc", "g_bc"):
        a = b[key]
        assert a.dtype == np.dtype(dtype) and a.flags.c_contiguous and not a.flags.writeable, key
    np.testing.assert_array_equal(b.f, _pairs(kw["f"]).astype(dtype))
    assert b.sizes == {"pde": 9, "data": 5, "bc": 4} and b.num_residuals == 36
    with pytest.raises(ValueError, match="read-only"):
        b.x_pde[0, 0] = 1.0
    # Made again from a Batch's own arrays (replace, astype to its dtype): nothing is converted.
    again = b.replace(counts={"pde": 20})
    assert all(again[k] is b[k] for k in b if k != "counts")
    assert b.astype(dtype) is b
    other = b.astype("float64" if dtype == "float32" else "float32")
    assert other.x_pde.dtype != b.x_pde.dtype


def test_batch_shares_memory_with_arrays_already_in_its_dtype(rng):
    x = rng.uniform(-1, 1, (6, 2))
    b = Batch(x_pde=x, kappa=2.0, dtype="float64")
    assert np.shares_memory(b.x_pde, x) and x.flags.writeable   # the caller's array untouched
    assert Batch(x_pde=x.astype(np.float32), kappa=2.0).dtype == np.float32   # dtype inferred


def test_batch_refuses_bad_entries_naming_them():
    x = np.zeros((3, 2))
    with pytest.raises(ValueError, match="x_pde"):
        Batch(x_pde=np.zeros(3), kappa=1.0)
    with pytest.raises(TypeError, match="kappa"):
        Batch(x_pde=x, kappa=1 + 2j)
    with pytest.raises(TypeError, match="x_bc"):
        Batch(x_bc=x + 0j, n_bc=x)
    with pytest.raises(ValueError, match="counts"):
        Batch(x_pde=x, kappa=1.0, counts={"interior": 3})
    with pytest.raises(TypeError, match="dtype"):
        Batch(x_pde=x, kappa=1.0, dtype="int32")
    with pytest.raises(TypeError, match="replace"):
        Batch(x_pde=x, kappa=1.0).replace(w_pde=2.0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_loss_operation_takes_the_batch_as_the_keywords(rng, dtype):
    spec = hp.ModelSpec(2, 4, 8, 2)
    ws = hp.Workspace(spec, 8, dtype)   # several chunks
    theta = hp.init_params(spec, dtype, seed=1)
    b = Batch(**_complex_inputs(rng), dtype=dtype)
    kw = dict(b)                         # the keyword form of the same arrays
    opts = dict(w_pde=0.5, w_data=2.0, w_bc=0.7)
    g1, g2 = np.empty_like(theta), np.empty_like(theta)
    l1 = ws.value_and_grad(theta, g1, batch=b, breakdown=True, **opts)
    l2 = ws.value_and_grad(theta, g2, breakdown=True, **kw, **opts)
    assert l1.as_dict() == l2.as_dict() and l1.total > 0
    np.testing.assert_array_equal(g1, g2)
    np.testing.assert_array_equal(ws.residuals(theta, batch=b, **opts), ws.residuals(theta, **kw, **opts))
    np.testing.assert_array_equal(ws.jacobian(theta, batch=b, rows=(3, 20), **opts),
                                  ws.jacobian(theta, rows=(3, 20), **kw, **opts))
    v = rng.normal(size=spec.num_params).astype(dtype)
    w = rng.normal(size=b.num_residuals).astype(dtype)
    np.testing.assert_array_equal(ws.jvp(theta, v, batch=b, **opts), ws.jvp(theta, v, **kw, **opts))
    np.testing.assert_array_equal(ws.vjp(theta, w, batch=b, **opts), ws.vjp(theta, w, **kw, **opts))
    # counts held by the batch act as the keyword does
    bc = b.replace(counts={"pde": 30})
    assert ws.value_and_grad(theta, g1, batch=bc) == ws.value_and_grad(theta, g2, **kw, counts={"pde": 30})


def test_general_operator_through_a_batch(rng):
    spec = hp.ModelSpec(2, 4, 6, 1)
    ws = hp.Workspace(spec, 16, "float64")
    theta = hp.init_params(spec, "float64", seed=2)
    n = 7
    a = rng.normal(size=(n, 2)) + 1j * rng.normal(size=(n, 2))
    b = Batch(x_pde=rng.uniform(-1, 1, (n, 2)), a_pde=a, b_pde=0.5j, c_pde=3.0 + 1j, dtype="float64")
    assert b.a_pde.shape == (n, 2, 2) and b.b_pde == 0.5j
    np.testing.assert_array_equal(ws.residuals(theta, batch=b), ws.residuals(theta, **b))


def test_batch_with_keywords_or_of_another_dtype_is_refused(rng):
    spec = hp.ModelSpec(2, 4, 8, 1)
    ws = hp.Workspace(spec, 64, "float32")
    theta = hp.init_params(spec, "float32", seed=0)
    grad = np.empty_like(theta)
    b = Batch(**_complex_inputs(rng), dtype="float32")
    for call in (lambda **k: ws.value_and_grad(theta, grad, **k), lambda **k: ws.residuals(theta, **k),
                 lambda **k: ws.jacobian(theta, **k),
                 lambda **k: ws.jvp(theta, np.zeros_like(theta), **k),
                 lambda **k: ws.vjp(theta, np.zeros(b.num_residuals, np.float32), **k)):
        with pytest.raises(TypeError, match=r"batch= given together with x_pde, counts"):
            call(batch=b, x_pde=b.x_pde, counts={"pde": 9})
        with pytest.raises(TypeError, match=r"batch: holds float64 arrays but the workspace is float32"):
            call(batch=b.astype("float64"))
        with pytest.raises(TypeError, match=r"batch: expected a helmpinn.Batch, got dict"):
            call(batch=dict(b))
    # the options still go beside it; a typo among them is named
    with pytest.raises(TypeError, match="w_pdf"):
        ws.value_and_grad(theta, grad, batch=b, w_pdf=1.0)


def test_training_set_makes_one_batch():
    p = hp.get_problem("heterogeneous2d")
    ts = p.sample(32, 16, 0, "sobol")
    b = ts.to_batch(np.float64)
    assert isinstance(b, Batch) and b.sizes == ts.sizes
    assert b.x_pde is not ts.x_pde and np.shares_memory(b.x_pde, ts.x_pde)   # a read-only view
    np.testing.assert_array_equal(b.g_bc, _pairs(ts.g))
    b32 = ts.to_batch(np.float32, counts={"pde": 64})
    assert b32.dtype == np.float32 and b32.counts == {"pde": 64}
    assert isinstance(ts.to_core(np.float32), Batch)   # the old name


class _Spy:
    """A Workspace stand-in that records the keywords of every loss-level call."""

    def __init__(self, ws):
        self._ws, self.calls = ws, []

    def __getattr__(self, name):
        target = getattr(self._ws, name)
        if name not in ("value_and_grad", "residuals", "jacobian", "jvp", "vjp"):
            return target

        def call(*args, **kw):
            self.calls.append((name, kw))
            return target(*args, **kw)
        return call


def _trainer(**kw):
    p = hp.get_problem("plane1d", k=5.0)
    model = hp.Model.create(1, 4, 8, 1, dtype=kw.pop("dtype", "float32"), seed=0, fourier_sigma=1.0)
    return hp.Trainer(p, model, pde_points=40, bc_points=2, progress=False, eval_every=0, **kw)


def test_trainer_converts_once_per_draw_and_passes_the_same_batch(monkeypatch):
    made = []
    to_batch = TrainingSet.to_batch
    monkeypatch.setattr(TrainingSet, "to_batch", lambda self, *a, **k: made.append(1) or to_batch(self, *a, **k))
    tr = _trainer(resample_every=4, val_points=0)   # no validation set: its one draw is not counted
    tr.workspace = spy = _Spy(tr.workspace)
    tr.fit(10)   # draws before steps 1, 5 and 9
    assert len(made) == 3 and len(spy.calls) == 10
    batches = [kw["batch"] for _, kw in spy.calls]
    assert all(isinstance(b, Batch) for b in batches)
    assert all(not (set(kw) & set(hp.batch.KEYWORDS)) for _, kw in spy.calls)   # no array keywords
    assert [len({id(b) for b in batches[i:i + 4]}) for i in (0, 4, 8)] == [1, 1, 1]
    assert batches[0] is not batches[4] is not batches[8]
    x = batches[4].x_pde
    assert all(b.x_pde is x for b in batches[4:8])
    assert tr.batch is batches[-1]
    # the loss breakdown came back with the loss: the history's terms are those of the calls
    assert all(kw.get("breakdown") for _, kw in spy.calls)
    assert len(tr.history.pde) == 10


def test_lm_and_lbfgs_use_the_trainers_batch():
    tr = _trainer(dtype="float64", resample_every=0)
    tr.resample()
    b = tr.batch
    tr.workspace = spy = _Spy(tr.workspace)
    tr.fit_lm(2)
    assert spy.calls and all(kw["batch"] is b for _, kw in spy.calls)
    assert {name for name, _ in spy.calls} >= {"jacobian", "residuals"}
    res = hp.optim.lm.CoreResiduals(tr.workspace, b, tr.weights)
    assert res.batch is b   # already in the workspace's dtype: not converted again
    assert b.astype(np.float64) is b   # what lbfgs takes of a float64 batch
    before = tr.model.params.copy()
    out = hp.lbfgs(tr.model.params, tr.model.spec, b, 3, weights=tr.weights)
    assert out.loss_after <= out.loss_before and not np.array_equal(before, tr.model.params)


def test_point_counts_have_their_own_names_and_the_old_ones_warn():
    tr = _trainer()
    assert (tr.pde_points, tr.bc_points) == (40, 2)
    p = hp.get_problem("plane1d", k=5.0)
    model = hp.Model.create(1, 4, 8, 1, seed=0)
    with pytest.warns(DeprecationWarning) as seen:
        old = hp.Trainer(p, model, n_pde=33, n_bc=1, progress=False)
    assert [str(w.message).split(" (")[0] for w in seen] == [
        "Trainer: n_pde= is deprecated, use pde_points=", "Trainer: n_bc= is deprecated, use bc_points="]
    assert all(w.filename == __file__ for w in seen)   # pointing at the caller
    assert (old.pde_points, old.bc_points) == (33, 1)
    with pytest.warns(DeprecationWarning, match="Trainer.n_bc is deprecated"):
        assert old.n_bc == 1
    with pytest.raises(TypeError, match="n_bc= is the old name of bc_points="):
        hp.Trainer(p, model, bc_points=2, n_bc=2, progress=False)
    with pytest.warns(DeprecationWarning, match="bc_points"):
        ts = p.sample(8, n_bc=2, rng=0)
    assert ts.sizes["pde"] == 8 and ts.x_bc.shape[1] == ts.n_bc.shape[1] == 1   # n_bc: normals
    s = hp.default_settings(p)
    assert "n_bc" not in s and s["bc_points"] == 2 and "n_bc" not in hp.optim.lm.lm_defaults(p)


def test_resume_reads_settings_saved_under_the_old_count_names(tmp_path):
    out = tmp_path / "run"
    args = ["train", "--problem", "plane1d", "--k", "5", "--hidden", "8", "--layers", "1",
            "--fourier", "4", "--points", "48", "--bc-points", "2", "--quiet", "--no-plots"]
    assert main([*args, "--steps", "3", "--out", str(out)]) == 0
    m = Model.load(out / "model.npz")
    settings = dict(m.metadata["settings"])
    settings["n_pde"], settings["n_bc"] = settings.pop("pde_points"), settings.pop("bc_points")
    m.save(out / "model.npz", metadata={**m.metadata, "settings": settings})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["train", "--resume", str(out), "--steps", "5", "--quiet", "--no-plots"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["final_step"] == 5 and metrics["settings"]["pde_points"] == 48
    assert metrics["settings"]["bc_points"] == 2


def test_builtin_problems_live_in_their_own_module():
    import helmpinn.problems.builtin as builtin
    import helmpinn.problems as problems

    for name in ("plane1d", "dirichlet2d", "heterogeneous2d", "cube3d"):
        assert callable(getattr(builtin, name)) and not hasattr(problems, name)   # no forwarding
        assert hp.get_problem(name).name == name
