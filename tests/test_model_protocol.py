"""The run loop's model protocol (helmpinn.models.model_protocol.TrainableModel): both built-in
models have it, a third kind of model written here trains through the Trainer with nothing in
helmpinn.training changed, a model without it is refused naming what it lacks, and nothing in the
run loop asks a model's class."""
import ast
import json
import pathlib
import warnings

import numpy as np
import pytest

import helmpinn as hp
from helmpinn.models import model_protocol
from helmpinn.models.decomposition import BoxConstraint, DecomposedModel
from helmpinn.models.model_protocol import MEMBERS, TrainableModel, check_trainable
from helmpinn.problems.geometry import Box
from helmpinn.training.drivers import mismatch

ROOT = pathlib.Path(__file__).resolve().parents[1]
K = 2 * np.pi


def plane_wave_problem():
    """A plane wave in the unit square, Dirichlet data from the exact solution on every side."""
    exact = lambda x: np.exp(1j * K * (0.8 * x[:, 0] + 0.6 * x[:, 1]))  # noqa: E731
    return hp.Problem(Box([0, 0], [1, 1]), kappa=K ** 2, source=None, bcs={"*": hp.Dirichlet(exact)}, exact=exact)


class FeatureModel:
    """A kind of model the package does not know: u(x) = Σ_j c_j exp(i w_j·x), complex c_j held as
    real pairs in one float64 vector, in NumPy alone (no core network: ``spec`` None). Its loss
    is the core's on the same points: each term's weight times its mean |residual|², the PDE's
    residual Δu + κ u − f = Σ_j c_j (κ − |w_j|²) e^{i w_j·x} − f, the data's u − y, a boundary
    row's ∂u/∂n + α u − g."""

    kind = "features"
    default_optimizer = "adam"
    spec = None

    def __init__(self, w, seed=0):
        self.w = np.asarray(w, np.float64)
        self.params = np.random.default_rng(seed).normal(scale=0.1, size=2 * len(self.w))
        self.optimizer_state, self.metadata, self.saved = {}, {}, []

    device, dtype, in_dim = "cpu", np.dtype(np.float64), 2

    @property
    def num_params(self):
        return len(self.params)

    def to(self, device):
        if device != "cpu":
            raise ValueError(f"device: this model lives on the CPU, got {device!r}")
        return self

    def params_host(self):
        return self.params.copy()

    def set_params(self, values):
        self.params[...] = values

    def _coefficients(self, theta):
        return theta[0::2] + 1j * theta[1::2]

    def predict(self, x):
        return np.exp(1j * np.asarray(x) @ self.w.T) @ self._coefficients(self.params)

    def save(self, path, *, optimizer_state=None, metadata=None):
        state = self.optimizer_state if optimizer_state is None else optimizer_state
        self.saved.append((str(path), {k: np.asarray(v).tolist() for k, v in state.items()}, dict(metadata or {})))

    def _system(self, ts, weights):
        """The rows (A, b, term) of the residuals r = A c − b, each scaled by sqrt(w_t / N_t)."""
        parts = []
        e = lambda x: np.exp(1j * x @ self.w.T)  # noqa: E731
        if len(ts.x_pde):
            f = np.zeros(len(ts.x_pde)) if ts.f is None else np.asarray(ts.f)
            kappa = np.broadcast_to(np.asarray(ts.kappa), (len(ts.x_pde),))
            parts.append(("pde", e(ts.x_pde) * (kappa[:, None] - np.sum(self.w ** 2, 1)), f))
        if len(ts.x_data):
            parts.append(("data", e(ts.x_data), np.asarray(ts.y)))
        if len(ts.x_bc):
            g = np.zeros(len(ts.x_bc)) if ts.g is None else np.asarray(ts.g)
            alpha = np.broadcast_to(np.asarray(ts.alpha), (len(ts.x_bc),))
            parts.append(("bc", e(ts.x_bc) * (1j * (ts.n_bc @ self.w.T) + alpha[:, None]), g))
        return [(t, np.sqrt(weights[t] / len(b)) * A, np.sqrt(weights[t] / len(b)) * b) for t, A, b in parts]

    def objective(self, training_set, weights, comm=None):
        system = self._system(training_set, weights)

        def value_and_grad(theta, grad):
            c = self._coefficients(theta)
            loss, terms, g = 0.0, {}, np.zeros(len(c), complex)
            for t, A, b in system:
                r = A @ c - b
                s = float(np.sum(np.abs(r) ** 2))
                loss += s
                terms[t] = s / weights[t] if weights[t] > 0 else 0.0
                g += A.conj().T @ r
            grad[0::2], grad[1::2] = 2 * g.real, 2 * g.imag
            return loss, terms

        return value_and_grad

    def loss_function(self, training_set, weights):
        value_and_grad = self.objective(training_set, weights)
        return lambda theta: value_and_grad(theta, np.empty_like(theta))[0]


def feature_model():
    """Twelve directions round the circle at |w| = 0.8 k, k and 1.2 k (the PDE rows weigh the
    off-shell ones), and the plane wave's own."""
    angles = np.linspace(0, 2 * np.pi, 12, endpoint=False)
    w = [r * K * np.stack([np.cos(angles), np.sin(angles)], 1) for r in (0.8, 1.0, 1.2)]
    return FeatureModel(np.concatenate(w + [K * np.array([[0.8, 0.6]])]), seed=1)


def test_both_models_have_the_protocol_and_members_lists_it():
    declared = set(TrainableModel.__annotations__) | {
        n for n, v in vars(TrainableModel).items() if not n.startswith("_") and (callable(v) or isinstance(v, property))}
    assert set(MEMBERS) == declared and len(MEMBERS) == len(set(MEMBERS))
    net = hp.Model.create(2, 4, 8, 1, dtype="float64")
    dd = DecomposedModel.create([0, 0], [1, 1], [(2, 2)], ff_dim=4, hidden_dim=8)
    for m, kind, default in ((net, "network", "adam"), (dd, "decomposed", "gn")):
        assert isinstance(m, TrainableModel) and m.kind == kind and m.default_optimizer == default
        check_trainable(m)
    assert net.spec is not None and net.objective(None, {}) is None and net.loss_function(None, {}) is None
    assert dd.spec is None and isinstance(feature_model(), TrainableModel)


def test_the_feature_model_gradient_is_its_loss_derivative():
    """The third model's own loss and gradient (what Adam steps on) in float64, by central
    differences: the test model is right, so the training test below tests the loop."""
    p = plane_wave_problem()
    m = feature_model()
    ts = p.sample(200, 40, np.random.default_rng(0))
    weights = {"pde": 1.0, "data": 5.0, "bc": 1.0}
    value_and_grad = m.objective(ts, weights)
    theta = m.params + 0.3 * np.random.default_rng(2).normal(size=m.num_params)
    grad = np.empty_like(theta)
    loss, terms = value_and_grad(theta, grad)
    assert loss == pytest.approx(sum(weights[t] * v for t, v in terms.items()), rel=1e-12)
    h = 1e-6
    for i in range(0, m.num_params, 5):
        e = np.zeros_like(theta)
        e[i] = h
        fd = (value_and_grad(theta + e, np.empty_like(theta))[0] - value_and_grad(theta - e, np.empty_like(theta))[0]) / (2 * h)
        assert grad[i] == pytest.approx(fd, rel=1e-6, abs=1e-8 * max(1.0, abs(loss)))


def test_a_third_kind_of_model_trains_with_adam_through_the_trainer(tmp_path):
    """Nothing in helmpinn.training knows FeatureModel: the Trainer takes it through the protocol,
    runs its default optimiser (Adam) on its own loss, evaluates its error and validation loss,
    writes its checkpoint, and refuses the drivers that do not train its kind."""
    p = plane_wave_problem()
    m = feature_model()
    t = hp.Trainer(p, m, pde_points=300, bc_points=80, lr=3e-2, eval_every=50, progress=False, n_test=20,
                   val_points=200, checkpoint_path=tmp_path / "ck.npz")
    assert t.model is m and t.workspace is None
    first_error = t.evaluate()
    h = t.fit(300)
    assert h.step[-1] == 300 and t.driver.name == "adam" and t.status is hp.RunStatus.STEPS_DONE
    assert h.loss[-1] < 1e-2 * h.loss[0]
    assert len(h.pde) == 300 and all(np.isfinite(h.pde)) and h.pde[-1] < h.pde[0] and all(np.isfinite(h.data))
    assert h.eval_step == [50, 100, 150, 200, 250, 300] and h.eval_error[-1] < 0.1 * first_error
    assert all(v is not None and np.isfinite(v) for v in h.eval_val_loss)   # its loss_function
    path, state, meta = m.saved[-1]   # the final checkpoint, through its save
    assert path == str(tmp_path / "ck.npz") and state["step"] == 300 and len(state["m"]) == m.num_params
    assert meta["step"] == 300 and meta["problem"] == p.name
    for name in ("lm", "lbfgs", "gn"):
        with pytest.raises(TypeError, match=rf"optimizer '{name}' trains (one network|a decomposed model), "
                                            r"not a model of kind 'features' \(the model is a FeatureModel\)"):
            t.fit(1, optimizer=name)


def test_a_model_without_the_protocol_is_refused_naming_what_it_lacks():
    class Lacking:
        kind, default_optimizer, spec = "x", "adam", None
        params = np.zeros(3)

    p = plane_wave_problem()
    with pytest.raises(TypeError, match=r"Trainer: model: expected a model with the run loop's protocol "
                                        r"\(helmpinn.models.model_protocol.TrainableModel\), but the Lacking "
                                        r"given lacks optimizer_state, metadata, device, dtype, in_dim, num_params, "
                                        r"to, params_host, set_params, predict, save, objective, loss_function"):
        hp.Trainer(p, Lacking(), progress=False)
    with pytest.raises(TypeError, match="the ndarray given lacks kind, default_optimizer, spec, params"):
        hp.Trainer(p, np.zeros(3), progress=False)
    assert not isinstance(Lacking(), TrainableModel)


def test_mismatch_names_a_new_kind_and_adam_trains_any():
    assert mismatch("features", "adam") is None
    assert mismatch("features", "lm") == "trains one network, not a model of kind 'features'"
    assert hp.run_plan(plane_wave_problem(), optimizer=hp.drivers.AdamDriver()).model == "network"


def test_nothing_in_the_run_loop_asks_a_models_class():
    """No isinstance/issubclass of a model class in helmpinn.training or helmpinn.memory: what
    differs between kinds is asked of the model (its protocol)."""
    names = {"Model", "DecomposedModel", "TrainableModel", "TrainableDecomposedModel"}
    found = []
    for path in sorted((ROOT / "python" / "helmpinn" / "training").glob("*.py")) + [ROOT / "python" / "helmpinn" / "memory.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("isinstance", "issubclass") \
                    and len(node.args) == 2:
                classes = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
                hit = {getattr(c, "id", getattr(c, "attr", None)) for c in classes} & names
                if hit:
                    found.append(f"{path.name}:{node.lineno} {sorted(hit)}")
    assert found == []


def test_the_old_names_still_work_with_a_warning():
    k = 4.0
    kw = dict(wavenumber=k, constraint=BoxConstraint([0, 0], [1, 1], 1 / k), ff_dim=4, hidden_dim=8)
    with pytest.warns(DeprecationWarning, match="TrainableDecomposedModel is deprecated"):
        old = model_protocol.TrainableDecomposedModel.create([0, 0], [1, 1], [(2, 2)], **kw)
    assert isinstance(old, DecomposedModel) and isinstance(old, TrainableModel)
    m = DecomposedModel.create([0, 0], [1, 1], [(2, 2)], **kw)
    with pytest.warns(DeprecationWarning, match="TrainableDecomposedModel.wrap is deprecated"):
        assert model_protocol.TrainableDecomposedModel.wrap(m) is m
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="model: expected a helmpinn.models"):
        model_protocol.TrainableDecomposedModel.wrap(hp.Model.create(2, 4, 8, 1))
    with pytest.warns(DeprecationWarning, match="trainable is deprecated"):
        assert model_protocol.trainable(m) is m
    from helmpinn.training import dd_driver
    from helmpinn import models

    assert dd_driver.TrainableDecomposedModel is models.TrainableDecomposedModel is model_protocol.TrainableDecomposedModel
    assert dd_driver.trainable is model_protocol.trainable and dd_driver.term_means is model_protocol.term_means
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DecomposedModel.create([0, 0], [1, 1], [(2, 2)], **kw).copy()   # the model's own path warns of nothing


def test_a_decomposed_models_file_keeps_its_optimiser_state(tmp_path):
    m = DecomposedModel.create([0, 0], [1, 1], [(2, 2)], ff_dim=4, hidden_dim=8)
    m.optimizer_state = {"gn_lambda": 0.125, "step": 4}
    m.metadata = {"note": "x"}
    m.save(tmp_path / "a" / "m.npz")
    with np.load(tmp_path / "a" / "m.npz") as z:
        meta = json.loads(str(z["config"]))["metadata"]
    assert meta == {"note": "x", "optimizer_state": {"gn_lambda": 0.125, "step": 4}}
    back = model_protocol.load_model(tmp_path / "a" / "m.npz")
    assert type(back) is DecomposedModel and back.optimizer_state == m.optimizer_state and back.metadata == {"note": "x"}
