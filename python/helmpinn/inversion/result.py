"""The result of :func:`helmpinn.invert`: :class:`Inversion`.

It holds the recovered medium (the spline's coefficients and grid), every wavefield's network,
the per-step history and the outcome in the manner of ``scipy.optimize.OptimizeResult``
(``success``, ``status``, ``message``). :meth:`Inversion.save` writes one ``.npz`` (arrays and
a JSON header, no pickle) atomically; :meth:`Inversion.load` checks what it reads and raises
ValueError naming the file and the problem. A run stopped on request (status 3) also holds its
``resume`` state, saved with it, from which :func:`helmpinn.invert` (``start=``) continues.
"""
from __future__ import annotations

import json
import os
import zipfile
from typing import Any, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import _core
from .._files import write_atomic
from ..media import GridField
from ..model import Model
from ..plots import _figure, save_figure
from ..reference import FDSolution
from .medium import SplineMedium

__all__ = ["Inversion", "STATUS"]

FORMAT = "helmpinn-inversion"
FORMAT_VERSION = 1
#: ``status`` codes: 0 every stage ran its steps or converged, 1 the time limit ended it, 2 a
#: step could not lower the loss at the largest damping, 3 a callback (or the CLI's signal)
#: asked it to stop: it can be continued (``invert(..., start=...)``).
STATUS = {0: "every stage converged or ran its steps", 1: "time limit reached",
          2: "a stage could not lower the loss at the largest damping",
          3: "stopped on request; invert(..., start=...) continues it"}
#: The resume state's numbers (in the file's header) and arrays (beside it, "resume_" + name).
_RESUME_NUMBERS = ("stage", "steps", "loss", "lam", "nu", "elapsed", "status")
_RESUME_ARRAYS = ("stage_coefficients", "D", "Dm")


class Inversion:
    """A finished inversion (module docstring).

    Attributes: ``medium`` (:class:`~helmpinn.inversion.medium.SplineMedium`), ``coefficients``
    (of ``m = 1/v²``), ``frequencies`` [F], ``spec`` (the networks' ModelSpec), ``params`` (a dict
    ``(f_index, s_index) -> θ``), ``history`` (a list of dicts per step: "time", "stage",
    "frequency", "loss", "data_misfit" (‖u(x_r) − d‖/‖d‖ over the stage's wavefields),
    "pde_residual" (the root mean square of the scaled PDE rows), "velocity_error" when a true
    model was given, "lam", "accepted"; a stage's first entry, before its first step, has
    ``lam`` and ``accepted`` None), ``success`` (True for status 0 and 1: the run ended as
    planned, whatever the error it reached), ``status`` (:data:`STATUS`), ``message``,
    ``initial_coefficients`` and ``true_velocity`` (node values or None) for the figure,
    ``data_fit`` [F] (the final relative data misfit per frequency); ``resume``: for a run
    stopped on request (status 3), where and how it continues (a dict: "stage" (the index in
    the frequency order) and "steps" done in it, the stage's starting medium
    "stage_coefficients", LM's "lam", "nu" and damping diagonals "D" [S, P] / "Dm", the last
    accepted "loss", "elapsed" seconds, the earlier stages' "status", and the "settings" a
    continuation must share); None otherwise.
    """

    def __init__(self, medium: SplineMedium, coefficients: NDArray, frequencies: NDArray, spec: Any,
                 params: Mapping[tuple[int, int], NDArray], history: Sequence[Mapping[str, Any]], *,
                 status: int, message: str, initial_coefficients: NDArray,
                 true_velocity: NDArray | None = None, data_fit: NDArray | None = None,
                 backgrounds: Mapping[tuple[int, int], tuple[Sequence[NDArray], NDArray]] | None = None,
                 resume: Mapping[str, Any] | None = None):
        self.medium = medium
        self.coefficients = np.asarray(coefficients, np.float64)
        self.frequencies = np.asarray(frequencies, np.float64)
        self.spec = spec
        self.params = {(int(f), int(s)): np.asarray(p, np.float64) for (f, s), p in params.items()}
        self.history = [dict(h) for h in history]
        self.status, self.message = int(status), str(message)
        self.success = self.status in (0, 1, 3)
        self.initial_coefficients = np.asarray(initial_coefficients, np.float64)
        self.true_velocity = None if true_velocity is None else np.asarray(true_velocity, np.float64)
        self.backgrounds = {(int(f), int(s)): ([np.asarray(a, np.float64) for a in axes],
                                                np.asarray(v, np.complex128))
                            for (f, s), (axes, v) in (backgrounds or {}).items()}
        self.data_fit = (np.full(len(self.frequencies), np.nan) if data_fit is None
                         else np.asarray(data_fit, np.float64))
        self.resume = None if resume is None else dict(resume)

    def __repr__(self) -> str:
        last = self.history[-1] if self.history else {}
        err = last.get("velocity_error")
        return (f"Inversion(success={self.success}, status={self.status}, message={self.message!r}, "
                f"steps={len(self.history)}, medium={self.medium.shape}"
                + (f", velocity_error={err:.3g}" if err is not None else "") + ")")

    @property
    def velocity(self):
        """The recovered velocity, a :class:`~helmpinn.GridField` through ``1/sqrt(m)`` at the
        medium's nodes (``outside="nearest"``)."""
        return self.medium.gridfield(self.coefficients, velocity=True)

    @property
    def initial_velocity(self):
        return self.medium.gridfield(self.initial_coefficients, velocity=True)

    def model(self, f_index: int, s_index: int) -> Model:
        """The network of wavefield (frequency ``f_index``, source ``s_index``)."""
        key = (int(f_index), int(s_index))
        if key not in self.params:
            raise ValueError(f"Inversion: no wavefield for frequency index {f_index} and source index "
                             f"{s_index}; have {sorted(self.params)}")
        return Model(self.spec, self.params[key].copy())

    def predict(self, f_index: int, s_index: int, x: ArrayLike) -> NDArray[np.complex128]:
        """The wavefield u(x) of frequency ``f_index``, source ``s_index`` (complex [N]): the
        network's, plus its background u₀ (the finite-difference field it was the scattered
        field of, cubic-spline interpolated) in the scattered-field form."""
        u = self.model(f_index, s_index).predict(x)
        key = (int(f_index), int(s_index))
        if key in self.backgrounds:
            axes, values = self.backgrounds[key]
            h = np.array([a[1] - a[0] for a in axes])
            u = u + FDSolution(axes=axes, values=values, h=h, order=4)(np.asarray(x, np.float64))
        return u

    # -- files ----------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> str:
        """Write everything to one ``.npz`` atomically (no pickle); returns the path."""
        keys = sorted(self.params)
        header = {"format": FORMAT, "version": FORMAT_VERSION, "status": self.status,
                  "message": self.message, "history": self.history, "keys": keys,
                  "spec": [self.spec.in_dim, self.spec.ff_dim, self.spec.hidden_dim,
                           self.spec.num_hidden_layers],
                  "lo": self.medium.lo.tolist(), "hi": self.medium.hi.tolist(),
                  "shape": list(self.medium.shape)}
        arrays = {"header": np.array(json.dumps(header)), "coefficients": self.coefficients,
                  "initial_coefficients": self.initial_coefficients, "frequencies": self.frequencies,
                  "data_fit": self.data_fit,
                  "params": np.stack([self.params[k] for k in keys]) if keys else np.zeros((0, 0))}
        if self.true_velocity is not None:
            arrays["true_velocity"] = self.true_velocity
        header["backgrounds"] = sorted(self.backgrounds)
        if self.resume is not None:
            header["resume"] = {k: self.resume[k] for k in (*_RESUME_NUMBERS, "settings")}
            header["resume_arrays"] = [k for k in _RESUME_ARRAYS if self.resume[k] is not None]
            for k in header["resume_arrays"]:
                arrays["resume_" + k] = np.asarray(self.resume[k], np.float64)
        arrays["header"] = np.array(json.dumps(header))
        for n, key in enumerate(header["backgrounds"]):
            axes, values = self.backgrounds[key]
            arrays[f"background{n}"] = values
            for j, a in enumerate(axes):
                arrays[f"background{n}_axis{j}"] = a
        return write_atomic(path, lambda fh: np.savez(fh, **arrays))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Inversion":
        """Read a file written by :meth:`save`; ValueError naming the file when it is not one."""
        path = os.fspath(path)
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            header = json.loads(str(arrays["header"][()]))
        except FileNotFoundError:
            raise FileNotFoundError(f"Inversion.load: no such file {path!r}") from None
        except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as e:
            raise ValueError(f"Inversion.load: {path!r} is not a readable inversion file ({e})") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise ValueError(f"Inversion.load: {path!r} is not a helmpinn inversion file")
        if header.get("version") != FORMAT_VERSION:
            raise ValueError(f"Inversion.load: {path!r} has format version {header.get('version')!r}, "
                             f"this helmpinn reads {FORMAT_VERSION}")
        try:
            medium = SplineMedium(header["lo"], header["hi"], header["shape"])
            spec = _core.ModelSpec(*[int(v) for v in header["spec"]])
            keys = [tuple(int(v) for v in k) for k in header["keys"]]
            params = arrays["params"]
            if params.shape != (len(keys), spec.num_params) and keys:
                raise ValueError(f"params of shape {params.shape}, expected ({len(keys)}, {spec.num_params})")
            coef = arrays["coefficients"]
            if coef.shape != (medium.size,) or arrays["initial_coefficients"].shape != (medium.size,):
                raise ValueError(f"coefficients of shape {coef.shape}, expected ({medium.size},)")
            for name in ("coefficients", "initial_coefficients", "params"):
                if not np.all(np.isfinite(arrays[name])):
                    raise ValueError(f"{name} holds values that are not finite")
            backgrounds = {}
            for n, key in enumerate(header.get("backgrounds", [])):
                axes = [arrays[f"background{n}_axis{j}"] for j in range(medium.dim)]
                values = arrays[f"background{n}"]
                if values.shape != tuple(len(a) for a in axes) or not np.all(np.isfinite(values)):
                    raise ValueError(f"background {n} of shape {values.shape} does not match its axes")
                backgrounds[(int(key[0]), int(key[1]))] = (axes, values)
            resume = _read_resume(header, arrays, medium.size, spec.num_params,
                                  len(arrays["frequencies"]))
            return cls(medium, coef, arrays["frequencies"], spec,
                       {k: params[i] for i, k in enumerate(keys)}, header["history"],
                       status=header["status"], message=header["message"],
                       initial_coefficients=arrays["initial_coefficients"],
                       true_velocity=arrays.get("true_velocity"), data_fit=arrays["data_fit"],
                       backgrounds=backgrounds, resume=resume)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"Inversion.load: {path!r}: {e}") from None

    # -- figures ----------------------------------------------------------------------------------
    def figure(self, n: int = 101):
        """A matplotlib Figure: the initial, recovered and (when known) true velocity on the
        medium's box, and the relative data misfit per frequency."""
        if self.medium.dim != 2:
            raise ValueError(f"Inversion.figure: draws 2-D media only, this one is {self.medium.dim}-D")
        panels = [("initial", self.initial_velocity), ("recovered", self.velocity)]
        if self.true_velocity is not None:
            panels.append(("true", GridField(self.true_velocity, self.medium.lo, self.medium.spacing,
                                             outside="nearest")))
        fig, axes = _figure(1, len(panels) + 1, figsize=(4.2 * (len(panels) + 1), 3.6))
        xs = [np.linspace(a, b, n) for a, b in zip(self.medium.lo, self.medium.hi)]
        pts = np.stack([g.ravel() for g in np.meshgrid(*xs, indexing="ij")], axis=1)
        values = [field(pts).reshape(n, n) for _, field in panels]
        vmin, vmax = min(float(v.min()) for v in values), max(float(v.max()) for v in values)
        extent = [self.medium.lo[0], self.medium.hi[0], self.medium.lo[1], self.medium.hi[1]]
        for ax, (name, _), v in zip(axes[0], panels, values):
            im = ax.imshow(v.T, origin="lower", extent=extent, vmin=vmin, vmax=vmax, cmap="viridis")
            ax.set_title(f"{name} velocity")
            fig.colorbar(im, ax=ax, shrink=0.8)
        ax = axes[0][-1]
        ax.bar([f"{f:g}" for f in self.frequencies], self.data_fit)
        ax.set_xlabel("frequency")
        ax.set_ylabel("‖u(x_r) − d‖ / ‖d‖")
        ax.set_title("data fit per frequency")
        fig.tight_layout()
        return fig

    def plot(self, path: str | os.PathLike, n: int = 101) -> str:
        """Write :meth:`figure` as a PNG (atomically); returns the path."""
        return save_figure(self.figure(n), path)


def _read_resume(header: dict, arrays: dict, M: int, P: int, F: int) -> dict | None:
    """The resume state of a file's header and arrays, checked (ValueError)."""
    state = header.get("resume")
    if state is None:
        return None
    if not isinstance(state, dict) or not isinstance(state.get("settings"), dict):
        raise ValueError("its resume state is not a table with the run's settings")
    out: dict[str, Any] = {"settings": state["settings"]}
    for k in _RESUME_NUMBERS:
        v = state.get(k)
        if k == "loss" and v is None:
            out[k] = None
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"its resume state's {k!r} is not a number ({v!r})")
        out[k] = v
    if not (isinstance(out["stage"], int) and 0 <= out["stage"] < F and isinstance(out["steps"], int)
            and out["steps"] >= 0 and out["status"] in (0, 1, 2)):
        raise ValueError(f"its resume state (stage {out['stage']!r}, steps {out['steps']!r}, status "
                         f"{out['status']!r}) is out of range")
    present = header.get("resume_arrays", [])
    shapes = {"stage_coefficients": (M,), "Dm": (M,), "D": None}
    for k in _RESUME_ARRAYS:
        a = arrays.get("resume_" + k) if k in present else None
        if a is not None and ((shapes[k] is not None and a.shape != shapes[k])
                              or (k == "D" and (a.ndim != 2 or a.shape[1] != P))
                              or not np.all(np.isfinite(a))):
            raise ValueError(f"its resume state's {k} of shape {a.shape} does not fit the medium and networks")
        out[k] = a
    if out["stage_coefficients"] is None or (out["steps"] > 0 and (out["D"] is None or out["Dm"] is None)):
        raise ValueError("its resume state lacks arrays (the stage's medium, the damping)")
    return out
