"""A wave survey: sources, receivers, frequencies and the complex data recorded, :class:`Survey`.

The data ``d[f, s, r]`` is the field of source s at frequency f recorded at receiver r, in the
problem's units: frequency f and velocity v give ``κ = (2πf/v)²``, as ``Problem(frequency=,
velocity=)``. It is what an inversion fits (:func:`helmpinn.reference.fwi`, the classical
baseline) and what :meth:`Survey.synthetic` makes from a known medium with
:func:`~helmpinn.reference.fd_solve`.

A survey file is an ``.npz`` archive without pickled objects: point sources are stored as their
positions, amplitudes and widths (a source given as a plain callable cannot be saved).

A survey may record its **free surface**: the faces of the box on which the recorded wavefield
was ``u = 0`` (no absorbing layer there), ``()`` when every face absorbed. Data with a free
surface hold its ghosts and multiples, and an inversion posed without it (or with a surface the
data lack) fits them with a wrong medium and no error; so :meth:`Survey.validate` refuses a
layer whose free faces differ from the record. :meth:`Survey.synthetic` records it; a survey
from elsewhere records nothing (``free_surface=None``) and is not checked.
"""
from __future__ import annotations

import math
import os
from typing import Any, Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._checks import integer, real_number
from ._files import read_npz, write_atomic
from .problems.geometry import Box, Domain
from .problems.pml import PML, checked_faces, face_axis, faces_of
from .problems import Problem
from .problems.sources import WIDTH_PER_WAVELENGTH, PointSource

__all__ = ["Survey", "FORMAT"]

#: The ``format`` entry of a survey file, and the version this helmpinn writes.
FORMAT = "helmpinn-survey"
FORMAT_VERSION = 2
#: The versions this helmpinn reads (version 1 has no ``free_surface`` entry: not recorded).
FORMAT_VERSIONS_READ = (1, 2)
#: Nodes per shortest wavelength of :meth:`Survey.synthetic`'s default grid (fourth order).
SYNTHETIC_NODES_PER_WAVELENGTH = 20


class Survey:
    """Sources, receivers, frequencies and the complex data ``[F, S, R]`` they recorded.

    Every argument is checked at once (:meth:`validate` without a domain): a ValueError or
    TypeError names what is wrong, before anything else is done.

    Parameters
    ----------
    sources : sequence of S :class:`~helmpinn.PointSource` or callables
        The sources; a callable is ``x [N, d] -> complex [N]`` (the source term).
    receivers : array [R, d]
        The receivers' positions (length units).
    frequencies : array [F]
        In the problem's units: ``κ = (2πf/v)²``.
    data : complex array [F, S, R]
        ``data[f, s, r]``: source s's field at frequency f at receiver r.
    weights : None or real array [F, S, R], each >= 0
        A weight per datum in the misfit (e.g. 1/σ, σ its noise level; 0 leaves a datum out).
    free_surface : None or sequence of face names
        The faces of the box on which the data's wavefield was ``u = 0`` (e.g. ``("ymin",)``;
        ``()``: every face absorbed); None (default): not recorded, not checked (module
        docstring).
    """

    def __init__(self, sources: Sequence[PointSource | Callable], receivers: ArrayLike,
                 frequencies: ArrayLike, data: ArrayLike, weights: ArrayLike | None = None, *,
                 free_surface: Sequence[str] | None = None):
        if callable(sources) or isinstance(sources, (str, bytes)) or not hasattr(sources, "__len__"):
            raise TypeError(f"Survey: sources must be a list of PointSource or callables, got "
                            f"{type(sources).__name__}")
        self.sources = list(sources)
        for i, s in enumerate(self.sources):
            if not callable(s):
                raise TypeError(f"Survey: sources[{i}] must be a PointSource or a callable "
                                f"x [N, d] -> complex [N], got {type(s).__name__}")
        self.receivers = _array("receivers", receivers, np.float64, 2)
        self.frequencies = _array("frequencies", frequencies, np.float64, 1)
        self.data = _array("data", data, np.complex128, 3)
        self.weights = None if weights is None else _array("weights", weights, np.float64, 3)
        self.free_surface = (None if free_surface is None
                             else checked_faces(free_surface, "Survey: free_surface", empty=True))
        self.validate()

    # -- sizes ----------------------------------------------------------------------------------
    @property
    def dim(self) -> int:
        """The space dimension d (the receivers' second axis)."""
        return int(self.receivers.shape[1])

    @property
    def n_sources(self) -> int:
        return len(self.sources)

    @property
    def n_receivers(self) -> int:
        return int(self.receivers.shape[0])

    @property
    def n_frequencies(self) -> int:
        return int(self.frequencies.shape[0])

    def __repr__(self) -> str:
        surface = "" if self.free_surface is None else f", free_surface={self.free_surface!r}"
        return (f"Survey({self.n_sources} sources, {self.n_receivers} receivers, frequencies "
                f"{self.frequencies.tolist()}, dim={self.dim}{surface})")

    # -- checks ---------------------------------------------------------------------------------
    def validate(self, domain=None, pml=None) -> "Survey":
        """Raise one ValueError naming the first problem found: an empty survey, shapes that
        disagree, non-finite or non-positive frequencies, NaN/inf data, negative or non-finite
        weights, a point source of another dimension, a free surface naming a face the
        receivers' dimension lacks; with a ``domain`` (its physical box), receivers outside it
        or (with a ``pml`` around it) in the layer, and a recorded free surface that differs
        from the faces ``pml`` leaves free (``pml=None``: none). Returns the survey."""
        S, R, F = self.n_sources, len(self.receivers), len(self.frequencies)
        if S == 0 or R == 0 or F == 0:
            raise ValueError(f"Survey: an empty survey ({S} sources, {R} receivers, {F} "
                             f"frequencies); each must be at least 1")
        d = self.receivers.shape[1]
        if not 1 <= d <= 3:
            raise ValueError(f"Survey: receivers must be [R, d] with d = 1, 2 or 3, got shape "
                             f"{self.receivers.shape}")
        if not np.all(np.isfinite(self.receivers)):
            raise ValueError(f"Survey: receivers must be finite; receiver {_first(~np.isfinite(self.receivers))} is not")
        bad = ~(np.isfinite(self.frequencies) & (self.frequencies > 0))
        if bad.any():
            i = _first(bad)
            raise ValueError(f"Survey: frequencies must be finite and > 0; frequencies[{i}] = "
                             f"{float(self.frequencies[i])!r}")
        if self.data.shape != (F, S, R):
            raise ValueError(f"Survey: data must have shape [F, S, R] = [{F}, {S}, {R}] "
                             f"(frequencies, sources, receivers), got {list(self.data.shape)}")
        if not np.all(np.isfinite(self.data)):
            i = np.argwhere(~np.isfinite(self.data))[0].tolist()
            raise ValueError(f"Survey: data must be finite (no NaN or inf); data{i} = "
                             f"{complex(self.data[tuple(i)])!r}")
        if self.weights is not None:
            if self.weights.shape != (F, S, R):
                raise ValueError(f"Survey: weights must have the data's shape [{F}, {S}, {R}], "
                                 f"got {list(self.weights.shape)}")
            bad = ~(np.isfinite(self.weights) & (self.weights >= 0))
            if bad.any():
                i = np.argwhere(bad)[0].tolist()
                raise ValueError(f"Survey: weights must be finite and >= 0; weights{i} = "
                                 f"{float(self.weights[tuple(i)])!r}")
            if not np.any(self.weights > 0):
                raise ValueError("Survey: every weight is 0 (no datum left to fit)")
        for i, s in enumerate(self.sources):
            if isinstance(s, PointSource) and s.dim != d:
                raise ValueError(f"Survey: sources[{i}] is a {s.dim}-D PointSource for {d}-D receivers")
        for name in self.free_surface or ():
            if face_axis(name) >= d:
                raise ValueError(f"Survey: free_surface: {name!r} is not a face of a {d}-D box; its "
                                 f"faces are {faces_of(d)}")
        if domain is not None:
            self._check_domain(domain, pml)
        return self

    def _check_domain(self, domain, pml) -> None:
        if not isinstance(domain, Domain):
            raise TypeError(f"Survey.validate: domain must be a helmpinn.problems.geometry.Domain, got "
                            f"{type(domain).__name__}")
        if pml is not None and not isinstance(pml, PML):
            raise TypeError(f"Survey.validate: pml must be a helmpinn.PML or None, got {type(pml).__name__}")
        if domain.dim != self.dim:
            raise ValueError(f"Survey: {self.dim}-D receivers for a {domain.dim}-D domain")
        self._check_surface(pml)
        lo, hi = domain.bounds
        tol = 1e-12 * float(np.max(hi - lo))
        inside = domain.contains(self.receivers) | np.all((self.receivers >= lo - tol)
                                                          & (self.receivers <= hi + tol), axis=1)
        if not inside.all():
            i = _first(~inside)
            x = self.receivers[i]
            where = "outside the domain"
            if pml is not None:
                olo, ohi = pml.outer_box(lo, hi)
                if np.all((x >= olo) & (x <= ohi)):
                    where = "in the PML (outside the physical box)"
            raise ValueError(f"Survey: receiver {i} at {x.tolist()} lies {where} "
                             f"{lo.tolist()} .. {hi.tolist()}; receivers must lie in the physical domain")
        for i, s in enumerate(self.sources):
            if isinstance(s, PointSource):
                olo, ohi = (lo, hi) if pml is None else pml.outer_box(lo, hi)
                if not np.all((s.position >= olo - tol) & (s.position <= ohi + tol)):
                    raise ValueError(f"Survey: sources[{i}] at {s.position.tolist()} lies outside "
                                     f"the domain {olo.tolist()} .. {ohi.tolist()}")

    def _check_surface(self, pml) -> None:
        """A ValueError when the faces ``pml`` leaves free are not the recorded free surface."""
        if self.free_surface is None:
            return
        posed = () if pml is None else pml.free_faces(self.dim)
        if set(posed) == set(self.free_surface):
            return
        layered = [f for f in faces_of(self.dim) if f not in self.free_surface]
        want = (f"PML(width, faces={tuple(layered)!r})" if self.free_surface else "PML(width) on every face")
        raise ValueError(
            f"Survey: the data were recorded with a free surface (u = 0) on {list(self.free_surface)} "
            f"and absorbing faces elsewhere, but pml={pml!r} leaves {list(posed)} free; pose the same "
            f"boundary, {want} (CLI: --pml WIDTH --pml-faces {' '.join(layered)}), or, to invert "
            f"anyway, set survey.free_surface = None")

    # -- files ----------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> str:
        """Write the survey to ``path`` (.npz, no pickled objects), atomically; returns the path.
        Only point sources can be saved (position, amplitude, width: NaN for none); a callable
        source is refused with a TypeError before anything is written."""
        for i, s in enumerate(self.sources):
            if not isinstance(s, PointSource):
                raise TypeError(f"Survey.save: sources[{i}] is a {type(s).__name__}, not a PointSource; "
                                f"only point sources (position, amplitude, width) can be saved")
        arrays = {
            "format": np.array(FORMAT),
            "format_version": np.array(FORMAT_VERSION, np.int64),
            "source_position": np.array([s.position for s in self.sources], np.float64),
            "source_amplitude": np.array([s.amplitude for s in self.sources], np.complex128),
            "source_width": np.array([np.nan if s.width is None else s.width for s in self.sources],
                                     np.float64),
            "receivers": self.receivers,
            "frequencies": self.frequencies,
            "data": self.data,
        }
        if self.weights is not None:
            arrays["weights"] = self.weights
        if self.free_surface is not None:
            arrays["free_surface"] = np.array(self.free_surface, dtype="<U8").reshape(-1)
        path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        return write_atomic(path, lambda fh: np.savez(fh, **arrays))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Survey":
        """Read a survey written by :meth:`save`: only a regular .npz file without pickled
        objects; every array is checked, and any problem is a ValueError naming the file."""
        path = os.fspath(path)
        arrays = read_npz(path, "helmpinn survey file")
        for key in ("format", "format_version", "source_position", "source_amplitude",
                    "source_width", "receivers", "frequencies", "data"):
            if key not in arrays:
                raise ValueError(f"{path}: missing {key!r}; not a helmpinn survey file")
        fmt = arrays["format"]
        if fmt.shape != () or fmt.dtype.kind != "U" or str(fmt) != FORMAT:
            raise ValueError(f"{path}: format is {fmt!r}, expected {FORMAT!r}; not a helmpinn survey file")
        version = arrays["format_version"]
        if (version.shape != () or version.dtype.kind not in "iu"
                or int(version) not in FORMAT_VERSIONS_READ):
            raise ValueError(f"{path}: format_version {version!r} is not supported (this helmpinn "
                             f"reads {list(FORMAT_VERSIONS_READ)})")
        unknown = set(arrays) - {"format", "format_version", "source_position", "source_amplitude",
                                 "source_width", "receivers", "frequencies", "data", "weights",
                                 "free_surface"}
        if unknown:
            raise ValueError(f"{path}: unknown entries {sorted(unknown)}; not a helmpinn survey file")
        try:
            pos = _stored(arrays, "source_position", "f", 2)
            amp = _stored(arrays, "source_amplitude", "fc", 1)
            width = _stored(arrays, "source_width", "f", 1)
            if not len(pos) == len(amp) == len(width):
                raise ValueError(f"source_position, source_amplitude and source_width disagree in "
                                 f"length ({len(pos)}, {len(amp)}, {len(width)})")
            sources = [PointSource(p, complex(a), None if np.isnan(w) else float(w))
                       for p, a, w in zip(pos, amp, width)]
            surface = None
            if "free_surface" in arrays:
                surface = arrays["free_surface"]
                if surface.ndim != 1 or (surface.size and surface.dtype.kind != "U"):
                    raise ValueError(f"free_surface must be a 1-D array of face names, got "
                                     f"{surface.dtype} of shape {list(surface.shape)}")
                surface = [str(f) for f in surface]
            return cls(sources, _stored(arrays, "receivers", "f", 2),
                       _stored(arrays, "frequencies", "f", 1), _stored(arrays, "data", "fc", 3),
                       _stored(arrays, "weights", "f", 3) if "weights" in arrays else None,
                       free_surface=surface)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}: {exc}") from None

    # -- synthetic data -------------------------------------------------------------------------
    @classmethod
    def synthetic(cls, velocity, domain, sources: Sequence[PointSource | Callable],
                  receivers: ArrayLike, frequencies: ArrayLike, *, pml=None, h: Any = None,
                  noise: float = 0.0, seed: int = 0) -> "Survey":
        """Data for a known medium: at each frequency the Helmholtz problem ``Δu + (2πf/v)² u =
        −source`` posed as ``Problem(domain, frequency=f, velocity=velocity, pml=pml)`` is solved
        by fourth-order finite differences (:class:`~helmpinn.reference.FDOperator`: one
        assembly and one LU per frequency, reused for every source) and read at the receivers by
        :class:`~helmpinn.reference.FDSolution`'s cubic-spline interpolation.

        ``velocity``: a number, a callable ``x [N, d] -> [N]`` (> 0) or a
        :class:`~helmpinn.GridField`; ``domain``: the physical :class:`~helmpinn.problems.geometry.Box`;
        ``pml``: the :class:`~helmpinn.PML` around it (default: one longest wavelength wide,
        ``max v / min f``, on every face; a given one is used as given, its ``faces`` included:
        a face it leaves out is a free surface, u = 0, and the data hold its ghosts and
        multiples; the survey records those faces as its ``free_surface``). ``h``: the grid
        spacing; default the shortest wavelength ``min v / max f`` (v sampled on the physical box) over
        :data:`SYNTHETIC_NODES_PER_WAVELENGTH` = 20, finer than any grid an inversion would use,
        so that inverting these data does not commit the "inverse crime" of fitting data made by
        the inversion's own discretisation. A :class:`~helmpinn.PointSource` without a width is
        given ``λ_min/10`` (the shortest wavelength's, at every frequency), and the returned
        survey carries the sources with that width, so that an inversion models the same source.
        ``noise``: the level of complex Gaussian noise added, relative to the root mean square of
        each frequency's clean data (``0.01``: 1 %), drawn from ``numpy.random.default_rng(seed)``.

        Every argument is checked (:meth:`validate` with the domain and PML, the grid's memory)
        before any solve.
        """
        # At call time: helmpinn.reference also holds fwi, which imports Survey (tests/test_layers.py, LAZY).
        from .reference import FDOperator

        if not isinstance(domain, Box):
            raise TypeError(f"Survey.synthetic: domain must be a helmpinn.problems.geometry.Box, got "
                            f"{type(domain).__name__}")
        if pml is not None and not isinstance(pml, PML):
            raise TypeError(f"Survey.synthetic: pml must be a helmpinn.PML or None, got {type(pml).__name__}")
        noise = real_number("Survey.synthetic", "noise", noise, low=0.0, low_open=False)
        seed = integer("Survey.synthetic", "seed", seed, low=0)
        if not (callable(velocity)):
            velocity = real_number("Survey.synthetic", "velocity", velocity, low=0.0)
        receivers = _array("receivers", receivers, np.float64, 2)
        frequencies = _array("frequencies", frequencies, np.float64, 1)
        sources = list(sources) if not callable(sources) and hasattr(sources, "__len__") else sources
        # Shapes, frequencies, receivers in the box: checked on a survey of zeros, before any solve.
        shape = (frequencies.size, len(sources) if isinstance(sources, list) else 0, len(receivers))
        blank = cls(sources, receivers, frequencies, np.zeros(shape, np.complex128))
        blank.validate(domain, pml)
        v_min, v_max = _velocity_range(velocity, domain)
        lam_min = v_min / float(frequencies.max())
        if pml is None:
            pml = PML(v_max / float(frequencies.min()))
        if h is None:
            h = lam_min / SYNTHETIC_NODES_PER_WAVELENGTH
        sources = [PointSource(s.position, s.amplitude, lam_min / WIDTH_PER_WAVELENGTH)
                   if isinstance(s, PointSource) and s.width is None else s for s in blank.sources]
        blank.validate(domain, pml)
        rng = np.random.default_rng(seed)
        data = np.empty(shape, np.complex128)
        for i, f in enumerate(frequencies):
            problem = Problem(domain, frequency=float(f), velocity=velocity, pml=pml)
            op = FDOperator(problem, h)
            lu = op.factorize()
            rhs = np.stack([op.rhs(s) for s in sources], axis=1)
            fields = lu.solve(rhs)
            for j in range(len(sources)):
                data[i, j] = op.solution(fields[:, j])(receivers)
            if noise > 0:
                rms = math.sqrt(float(np.mean(np.abs(data[i]) ** 2)))
                data[i] += noise * rms * (rng.standard_normal(data[i].shape)
                                          + 1j * rng.standard_normal(data[i].shape)) / math.sqrt(2)
        return cls(sources, receivers, frequencies, data, free_surface=pml.free_faces(domain.dim))


def _first(mask: NDArray) -> int:
    return int(np.flatnonzero(mask.reshape(len(mask), -1).any(axis=1))[0])


def _array(name: str, value: Any, dtype, ndim: int) -> NDArray:
    """``value`` as a C-contiguous array of ``dtype`` with ``ndim`` axes, or a TypeError /
    ValueError naming it (complex values for a real array are refused, not truncated)."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"Survey: {name} must be a numeric array, got {type(value).__name__}") from exc
    if arr.dtype.kind not in ("fiu" if dtype is np.float64 else "fiuc") or arr.dtype == bool:
        raise TypeError(f"Survey: {name} must be a {'real' if dtype is np.float64 else 'complex'} "
                        f"numeric array, got dtype {arr.dtype}")
    if name == "frequencies" and arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != ndim:
        raise ValueError(f"Survey: {name} must have {ndim} axes, got shape {list(arr.shape)}")
    return np.array(arr, dtype=dtype, order="C", copy=True)   # the survey's own copy


def _stored(arrays: dict, key: str, kinds: str, ndim: int) -> NDArray:
    arr = arrays[key]
    if arr.dtype.kind not in kinds or arr.ndim != ndim:
        raise ValueError(f"{key} must be a {ndim}-axis {'complex' if 'c' in kinds else 'real'} "
                         f"array, got {arr.dtype} of shape {list(arr.shape)}")
    return arr


def _velocity_range(velocity, domain) -> tuple[float, float]:
    """The smallest and largest velocity on a regular grid over the physical box (a number:
    itself), checked finite and > 0."""
    if not callable(velocity):
        return float(velocity), float(velocity)
    n = {1: 1001, 2: 201, 3: 41}[domain.dim]
    x = domain.grid(n)[0]
    v = np.asarray(velocity(x), np.float64)
    if v.shape != (len(x),) or not np.all(np.isfinite(v) & (v > 0)):
        raise ValueError(f"Survey.synthetic: velocity must give finite values > 0 of shape "
                         f"({len(x)},) on the domain, got shape {v.shape}")
    return float(v.min()), float(v.max())
