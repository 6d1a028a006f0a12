"""The model: a :class:`~helmpinn._core.ModelSpec`, ONE flat parameter vector and named views.

``Model.save`` writes parameters, spec, dtype, optimiser state and metadata into one ``.npz``
atomically (a temporary file ``.tmp-<name>-<random>.npz`` in the same folder, then
``os.replace``; the file gets the permissions of any new file, 0666 less the umask);
``Model.load`` checks everything it reads and raises ``ValueError`` naming the file and what is
wrong, also for a truncated or corrupted file.

A model lives on one device (``device="cpu"``, the default, or ``"cuda"`` / ``"cuda:N"``): on a
GPU its ``params`` are a :class:`helmpinn.DeviceArray` that the library owns, ``predict`` copies
the points there and the results back, and ``save`` copies everything to the host first.
"""
from __future__ import annotations

import json
import os
from typing import Any, ClassVar, Mapping

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import _core
from .. import _device
from .._checks import integer
from .._files import TEMP_PREFIX, read_npz, write_atomic   # TEMP_PREFIX: the temporary files' names
from ..defaults import fourier_sigma as _sigma_rule   # (the name fourier_sigma is Model.create's argument)
from ..params import init_params

__all__ = ["Model", "FORMAT_VERSION", "TEMP_PREFIX"]

FORMAT_VERSION = 1
_DTYPES = ("float32", "float64")


def _dtype_name(dtype: Any) -> str:
    name = np.dtype(dtype).name
    if name not in _DTYPES:
        raise TypeError(f"dtype must be float32 or float64, got {name}")
    return name


class Model:
    """A Fourier-feature tanh MLP ``x [N, d] -> u`` complex, held as one flat parameter vector.

    ``params`` is the flat buffer (float32 or float64, C-contiguous); ``views`` are named
    zero-copy views of it ("B", "W0", "b0", ...). ``optimizer_state`` (a dict of arrays and
    numbers, e.g. Adam's ``m``, ``v``, ``step``) and ``metadata`` (JSON-able dict) travel with
    the model through :meth:`save` / :meth:`load`.

    ``device``: "cpu" or "cuda" / "cuda:N" (None: where ``params`` already are: "cpu" for a host
    array, the GPU of a :class:`helmpinn.DeviceArray`). On a GPU, ``params`` is a DeviceArray
    (device memory; no NumPy views: use :meth:`params_host` for a NumPy copy and
    :meth:`set_params` to write), and the arrays of ``optimizer_state`` may be DeviceArrays too
    (a Trainer's live Adam moments). ``device="cuda"`` raises RuntimeError before any work when
    helmpinn was built without CUDA or the GPU is not there.

    It has the run loop's model protocol (:class:`~helmpinn.models.model_protocol.TrainableModel`):
    one core network (``spec``), whose loss the :class:`~helmpinn.Trainer` computes on a core
    workspace of its own (so :meth:`objective` and :meth:`loss_function` give None).
    """

    #: The kind of model, as the drivers' ``trains`` name it (the protocol's ``kind``).
    kind: ClassVar[str] = "network"
    #: The optimiser a Trainer runs on it when none is named.
    default_optimizer: ClassVar[str] = "adam"

    def __init__(self, spec: _core.ModelSpec, params: ArrayLike, *,
                 optimizer_state: Mapping[str, Any] | None = None,
                 metadata: Mapping[str, Any] | None = None, device: str | None = None):
        where = _device.check(device, "Model") if device is not None else None
        if _device.is_device_array(params):
            if params.shape != (spec.num_params,):
                raise ValueError(f"params must have shape ({spec.num_params},) for "
                                 f"{_spec_str(spec)}, got {params.shape}")
            _dtype_name(params.dtype)
            if where is not None and where != _device.name_of(params):
                params = params.copy_to_host()   # moved below
        elif _device.is_foreign_device_array(params):
            raise TypeError(f"params: expected a NumPy array or a helmpinn.DeviceArray, got "
                            f"{type(params).__module__}.{type(params).__name__} (pass a host copy, "
                            f"with device='cuda' to put it on the GPU)")
        if not _device.is_device_array(params):
            params = np.asarray(params)
            _dtype_name(params.dtype)
            if params.shape != (spec.num_params,):
                raise ValueError(f"params must have shape ({spec.num_params},) for "
                                 f"{_spec_str(spec)}, got {params.shape}")
            params = np.ascontiguousarray(params)
            if where not in (None, "cpu"):
                params = _device.upload(params, where)
        self.spec = spec
        self.params = params
        self.optimizer_state: dict[str, Any] = dict(optimizer_state or {})
        self.metadata: dict[str, Any] = dict(metadata or {})
        self._ws: _core.Workspace | None = None

    @classmethod
    def create(cls, in_dim: Any, ff_dim: int = 32, hidden_dim: int = 64, num_hidden_layers: int = 2,
               *, dtype: str = "float32", seed: int = 0, fourier_sigma: float | str = "auto",
               problem: Any = None, device: str = "cpu") -> "Model":
        """A freshly initialised model (``helmpinn.init_params``; B ~ N(0, fourier_sigma²)), on
        ``device`` (initialised on the host, the same numbers on every device, then copied).

        Parameters
        ----------
        in_dim : int or Problem
            The input dimension d, or a :class:`~helmpinn.Problem` (d is then its ``dim``, and
            it is the ``problem`` of the Fourier scale).
        fourier_sigma : float or "auto"
            The standard deviation of the Fourier frequencies B. "auto" (the default):
            :func:`helmpinn.defaults.fourier_sigma` of ``problem``, ``k / (2π sqrt(d))`` from its
            wavenumber k (at least π over the sampled domain's largest extent), so that the
            features' angular frequencies have a root mean square of k; 1.0 without a problem.
        problem : Problem, optional
            The problem the model is for (its dimension must be ``in_dim``).
        """
        device = _device.check(device, "Model.create")
        if hasattr(in_dim, "wavenumber") and hasattr(in_dim, "dim"):
            if problem is not None and problem is not in_dim:
                raise ValueError("Model.create: got a problem both as in_dim and as problem=; give it once")
            problem, in_dim = in_dim, in_dim.dim
        if problem is not None and int(in_dim) != int(problem.dim):
            raise ValueError(f"Model.create: in_dim {in_dim} does not match the problem's dimension "
                             f"{problem.dim}")
        if isinstance(fourier_sigma, str):
            if fourier_sigma != "auto":
                raise ValueError(f"Model.create: fourier_sigma must be a number or 'auto', got {fourier_sigma!r}")
            fourier_sigma = 1.0 if problem is None else _sigma_rule(problem)
        spec = _core.ModelSpec(*(integer("Model.create", name, value) for name, value in (
            ("in_dim", in_dim), ("ff_dim", ff_dim), ("hidden_dim", hidden_dim),
            ("num_hidden_layers", num_hidden_layers))))
        params = init_params(spec, dtype=_dtype_name(dtype), seed=seed, fourier_sigma=fourier_sigma)
        return cls(spec, params, device=device)

    # -- basic properties ---------------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype:
        return self.params.dtype

    @property
    def device(self) -> str:
        """Where the parameters are: "cpu" or "cuda:N"."""
        return _device.name_of(self.params)

    @property
    def num_params(self) -> int:
        return self.spec.num_params

    @property
    def in_dim(self) -> int:
        return self.spec.in_dim

    @property
    def views(self) -> dict[str, NDArray]:
        """Named zero-copy views of ``params`` (CPU models only: device memory has no NumPy
        views; ``spec.views(model.params_host())`` gives views of a copy)."""
        if self.device != "cpu":
            raise RuntimeError(f"Model.views: the parameters are on {self.device}, which NumPy "
                               f"cannot view; use model.spec.views(model.params_host()) for a copy")
        return self.spec.views(self.params)

    def params_host(self) -> NDArray:
        """The parameters as a new NumPy array (a copy on every device: writing to it never
        changes the model; :meth:`set_params` does)."""
        return self.params.copy_to_host() if self.device != "cpu" else self.params.copy()

    def set_params(self, values: ArrayLike) -> None:
        """Overwrites the parameters in place with ``values`` (``[num_params]``, converted to the
        model's dtype): the same buffer, on the host or the GPU (one copy there)."""
        values = np.asarray(_device.to_host(values))
        if values.shape != (self.num_params,):
            raise ValueError(f"set_params: expected shape ({self.num_params},), got {values.shape}")
        _device.write(self.params, values.astype(self.dtype, copy=False))

    def to(self, device: str) -> "Model":
        """Moves this model to ``device`` ("cpu", "cuda", "cuda:N") in place and returns it
        (like ``torch.nn.Module.to``): the parameters are copied once and ``params`` becomes a
        NumPy array or a :class:`helmpinn.DeviceArray`; device arrays of the optimiser state
        come back to the host (a Trainer copies them to the device when it resumes). A model
        already there is left as it is. Make a new Trainer after moving a model."""
        where = _device.check(device, "Model.to")
        if where == self.device:
            return self
        host = self.params_host() if self.device != "cpu" else self.params
        self.params = host if where == "cpu" else _device.upload(host, where)
        self.optimizer_state = _state_on_host(self.optimizer_state, copy=False)
        self._ws = None
        return self

    def __repr__(self) -> str:
        where = "" if self.device == "cpu" else f", device='{self.device}'"
        return f"Model({_spec_str(self.spec)}, {self.num_params} params, {self.dtype.name}{where})"

    def __getstate__(self) -> dict[str, Any]:
        """Pickling and ``copy.deepcopy`` leave out the cached Workspace (rebuilt by the next
        :meth:`predict`; a Workspace holds native buffers and is not picklable)."""
        state = self.__dict__.copy()
        state["_ws"] = None
        return state

    def copy(self) -> "Model":
        """An independent copy on the same device (optimiser state copied to the host)."""
        return Model(self.spec, self.params_host(), optimizer_state=_state_on_host(self.optimizer_state),
                     metadata=dict(self.metadata), device=self.device)

    def objective(self, training_set: Any, weights: Mapping[str, float], comm: Any = None) -> None:
        """None: the run loop computes this model's loss and gradient on its own core workspace
        (a model that computes its own returns its ``value_and_grad`` here)."""
        return None

    def loss_function(self, training_set: Any, weights: Mapping[str, float]) -> None:
        """None: the run loop computes this model's loss on a core workspace (a model that
        computes its own returns its ``θ -> loss`` here)."""
        return None

    def astype(self, dtype: Any) -> "Model":
        """A copy with parameters in ``dtype``, on the same device (optimiser state dropped)."""
        name = _dtype_name(dtype)
        return Model(self.spec, self.params_host().astype(name), metadata=dict(self.metadata),
                     device=self.device)

    # -- evaluation ---------------------------------------------------------------------------
    def workspace(self, batch_size: int = 4096) -> _core.Workspace:
        """A Workspace of this model's spec, dtype and device (cached for predict)."""
        ws = self._ws
        if ws is None or ws.batch_size != batch_size or ws.dtype != self.dtype or ws.spec != self.spec \
                or ws.device != self.device:
            ws = _core.Workspace(self.spec, batch_size, self.dtype.name, device=self.device)
            self._ws = ws
        return ws

    def _forward(self, x: ArrayLike, derivatives: int, batch_size: int) -> Any:
        """The workspace's forward on host points, results on the host (on a GPU: the points
        copied there once, each result copied back once)."""
        x = self._points(x)
        ws = self.workspace(batch_size)
        if self.device == "cpu":
            return ws.forward(self.params, x, derivatives)
        out = ws.forward(self.params, _device.upload(x, self.device), derivatives)
        return tuple(a.copy_to_host() for a in out) if isinstance(out, tuple) else out.copy_to_host()

    def _points(self, x: ArrayLike) -> NDArray:
        x = np.asarray(x, dtype=self.dtype)
        if x.ndim == 1 and self.in_dim == 1:
            x = x[:, None]
        if x.ndim != 2 or x.shape[1] != self.in_dim:
            raise ValueError(f"x must be [N, {self.in_dim}], got shape {x.shape}")
        return np.ascontiguousarray(x)

    def predict(self, x: ArrayLike, batch_size: int = 4096) -> NDArray[np.complex128]:
        """u(x) as complex128 [N], for any N (the Workspace walks the points in chunks)."""
        u = self._forward(x, 0, batch_size)
        return u[:, 0].astype(np.float64) + 1j * u[:, 1]

    def predict_derivatives(self, x: ArrayLike, batch_size: int = 4096
                            ) -> tuple[NDArray[np.complex128], NDArray[np.complex128], NDArray[np.complex128]]:
        """(u [N], grad u [N, d], lap u [N]) as complex128."""
        u, g, lap = self._forward(x, 2, batch_size)
        c = lambda a: a[..., 0].astype(np.float64) + 1j * a[..., 1]  # noqa: E731
        return c(u), c(g), c(lap)

    # -- persistence --------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, *, optimizer_state: Mapping[str, Any] | None = None,
             metadata: Mapping[str, Any] | None = None) -> None:
        """Write params, spec, dtype, optimiser state and metadata to ``path`` (.npz), atomically.

        ``optimizer_state`` / ``metadata`` default to the model's own. Arrays of the optimiser
        state are stored under ``opt/<name>``, scalars as numbers. A model on a GPU is copied to
        the host first (its parameters and any device array of the optimiser state).
        """
        state = self.optimizer_state if optimizer_state is None else dict(optimizer_state)
        state = _state_on_host(state, copy=False)
        meta = self.metadata if metadata is None else dict(metadata)
        arrays: dict[str, np.ndarray] = {
            "format_version": np.array(FORMAT_VERSION, dtype=np.int64),
            "spec": np.array([self.spec.in_dim, self.spec.ff_dim, self.spec.hidden_dim,
                              self.spec.num_hidden_layers], dtype=np.int64),
            "dtype": np.array(self.dtype.name),
            "params": self.params_host() if self.device != "cpu" else self.params,
            "metadata": np.array(json.dumps(meta, default=_json_default)),
        }
        for key, value in state.items():
            arr = np.asarray(value)
            if arr.dtype == object:
                raise TypeError(f"optimizer_state[{key!r}] must be numeric, got {type(value).__name__}")
            arrays[f"opt/{key}"] = arr
        path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        write_atomic(path, lambda fh: np.savez(fh, **arrays))

    @classmethod
    def load(cls, path: str | os.PathLike, *, device: str = "cpu") -> "Model":
        """Read a model written by :meth:`save`; raises ValueError naming anything invalid.
        ``device``: where to put it (the optimiser state stays on the host until a Trainer
        resumes from it)."""
        device = _device.check(device, "Model.load")
        path = os.fspath(path)
        arrays = read_npz(path)
        files = set(arrays)
        for key in ("format_version", "spec", "dtype", "params"):
            if key not in files:
                raise ValueError(f"{path}: missing {key!r}; not a helmpinn model file")
        try:
            version = int(arrays["format_version"])
        except (TypeError, ValueError):
            raise ValueError(f"{path}: format_version is not an integer") from None
        if version != FORMAT_VERSION:
            raise ValueError(f"{path}: format_version {version} is not supported "
                             f"(this helmpinn reads {FORMAT_VERSION})")
        spec_arr = arrays["spec"]
        if spec_arr.shape != (4,) or spec_arr.dtype.kind not in "iu":
            raise ValueError(f"{path}: spec must be 4 integers (in_dim, ff_dim, hidden_dim, "
                             f"num_hidden_layers), got {spec_arr.dtype} {spec_arr.shape}")
        try:
            spec = _core.ModelSpec(*(int(v) for v in spec_arr))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{path}: invalid spec {spec_arr.tolist()}: {exc}") from exc
        dtype = arrays["dtype"]
        if dtype.shape != () or dtype.dtype.kind != "U" or str(dtype) not in _DTYPES:
            raise ValueError(f"{path}: dtype must be 'float32' or 'float64', got {dtype!r}")
        dtype = str(dtype)
        params = arrays["params"]
        if params.dtype.name != dtype:
            raise ValueError(f"{path}: params are {params.dtype.name} but dtype says {dtype}")
        if params.shape != (spec.num_params,):
            raise ValueError(f"{path}: params have shape {params.shape}, but spec "
                             f"{spec_arr.tolist()} needs ({spec.num_params},)")
        if not np.all(np.isfinite(params)):
            raise ValueError(f"{path}: params contain NaN or Inf")
        state: dict[str, Any] = {}
        for key in sorted(files):
            if not key.startswith("opt/"):
                continue
            arr = arrays[key]
            name = key[4:]
            state[name] = arr.item() if arr.ndim == 0 else arr
            if arr.ndim and arr.shape == params.shape and arr.dtype != params.dtype:
                raise ValueError(f"{path}: optimiser state {name!r} is {arr.dtype.name}, "
                                 f"params are {dtype}")
        for name in ("m", "v"):
            if name in state and np.shape(state[name]) != params.shape:
                raise ValueError(f"{path}: optimiser state {name!r} has shape "
                                 f"{np.shape(state[name])}, expected {params.shape}")
        meta: dict[str, Any] = {}
        if "metadata" in files:
            try:
                meta = json.loads(str(arrays["metadata"]))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: metadata is not valid JSON ({exc})") from exc
            if not isinstance(meta, dict):
                raise ValueError(f"{path}: metadata must be a JSON object")
        return cls(spec, params, optimizer_state=state, metadata=meta, device=device)


def _state_on_host(state: Mapping[str, Any], copy: bool = True) -> dict[str, Any]:
    """``state`` with every DeviceArray copied to a NumPy array (NumPy arrays copied too when
    ``copy``)."""
    out = {}
    for k, v in state.items():
        if _device.is_device_array(v):
            v = v.copy_to_host()
        elif copy and isinstance(v, np.ndarray):
            v = v.copy()
        out[k] = v
    return out


def _spec_str(spec: _core.ModelSpec) -> str:
    return (f"in_dim={spec.in_dim}, ff_dim={spec.ff_dim}, hidden_dim={spec.hidden_dim}, "
            f"num_hidden_layers={spec.num_hidden_layers}")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, complex):
        return [obj.real, obj.imag]
    raise TypeError(f"metadata value of type {type(obj).__name__} is not JSON-serialisable")
