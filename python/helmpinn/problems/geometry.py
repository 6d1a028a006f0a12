"""Domains and collocation sampling: interval, box (any d), ball, polygon (2-D), a box with an
obstacle (a ball, a polygon) removed, and explicit point clouds.

Every domain answers two questions:

- ``sample_interior(n, rng, method="uniform")`` -> ``x [n, d]`` (float64), and
- ``sample_boundary(n, rng, method="uniform")`` -> ``BoundarySample(x [n, d], normals [n, d],
  parts [n])``: points on the boundary, their outward unit normals, and a part label (a string)
  per point, so that a Problem can attach a different boundary condition to each part.

``method`` is ``"uniform"`` (independent uniform random points), ``"sobol"`` or ``"halton"``
(scrambled quasi-random sequences from ``scipy.stats.qmc``, seeded from ``rng``). Boundary
points are spread over the parts in proportion to their measure (length, area); the points of
a part are drawn with the same method.

Part names: a box's faces are ``"xmin", "xmax", "ymin", "ymax", "zmin", "zmax"`` (dimensions
beyond the third are ``"x3min"``, ``"x3max"``, ...); a ball's boundary is ``"sphere"``, a polygon's
``"polygon"``; a box with an obstacle removed (:class:`BoxMinusObstacle`, :class:`BoxMinusBall`)
has the box's faces and ``"scatterer"`` (whose outward normal points into the removed obstacle).

``reentrant_corners()`` lists the corners where a domain's angle exceeds π (a polygonal
obstacle's vertices, a polygon's reflex ones), at which the field is singular; a problem's PDE
rows are weighted down about them (:func:`helmpinn.problems.sampler.corner_weights`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "BoundarySample",
    "Domain",
    "Box",
    "Interval",
    "Ball",
    "Disk",
    "BoxMinusBall",
    "BoxMinusObstacle",
    "Polygon",
    "PointCloud",
    "sample_unit_cube",
    "METHODS",
]

METHODS = ("uniform", "sobol", "halton")


@dataclass(frozen=True)
class BoundarySample:
    """Boundary points ``x [n, d]``, outward unit normals ``normals [n, d]``, labels ``parts [n]``."""

    x: NDArray[np.float64]
    normals: NDArray[np.float64]
    parts: NDArray[np.str_]

    def __len__(self) -> int:
        return len(self.x)

    def select(self, mask: NDArray[np.bool_]) -> "BoundarySample":
        return BoundarySample(self.x[mask], self.normals[mask], self.parts[mask])

    def __iter__(self):  # allows ``x, normals, parts = domain.sample_boundary(...)``
        return iter((self.x, self.normals, self.parts))


def _as_rng(rng: np.random.Generator | int | None) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    return np.random.default_rng(rng)


def sample_unit_cube(n: int, d: int, rng: np.random.Generator | int | None,
                     method: str = "uniform") -> NDArray[np.float64]:
    """``n`` points in ``[0, 1)^d`` drawn with ``method`` ("uniform", "sobol", "halton")."""
    rng = _as_rng(rng)
    n = int(n)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if d < 1:
        raise ValueError(f"dimension must be >= 1, got {d}")
    if method == "uniform":
        return rng.random((n, d))
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if n == 0:
        return np.empty((0, d))
    from scipy.stats import qmc

    seed = int(rng.integers(2**63 - 1))
    if method == "sobol":
        # Sobol' points keep their balance properties for powers of two: draw 2^m >= n points
        # (scipy warns otherwise) and keep the first n.
        m = max(0, math.ceil(math.log2(n)))
        pts = qmc.Sobol(d, scramble=True, seed=seed).random_base2(m)[:n]
    else:
        pts = qmc.Halton(d, scramble=True, seed=seed).random(n)
    return np.ascontiguousarray(pts, dtype=np.float64)


def _split_counts(n: int, weights: ArrayLike) -> NDArray[np.int64]:
    """Split n into integer counts proportional to weights (largest remainder, deterministic)."""
    w = np.asarray(weights, dtype=np.float64)
    share = n * w / w.sum()
    counts = np.floor(share).astype(np.int64)
    rest = n - int(counts.sum())
    if rest > 0:
        order = np.argsort(-(share - counts), kind="stable")
        counts[order[:rest]] += 1
    return counts


def _sphere_coords(d: int) -> int:
    """How many [0,1) coordinates _unit_vectors needs for a direction in R^d."""
    return d - 1 if d <= 3 else d


def _unit_vectors(u: NDArray[np.float64], d: int) -> NDArray[np.float64]:
    """Map points of [0,1)^_sphere_coords(d) to directions uniform on the unit sphere in R^d."""
    if d == 2:
        t = 2.0 * np.pi * u[:, 0]
        return np.stack([np.cos(t), np.sin(t)], axis=1)
    if d == 3:  # area-preserving map: z uniform in [-1, 1], azimuth uniform
        z = 1.0 - 2.0 * u[:, 0]
        t = 2.0 * np.pi * u[:, 1]
        r = np.sqrt(np.maximum(0.0, 1.0 - z * z))
        return np.stack([r * np.cos(t), r * np.sin(t), z], axis=1)
    from scipy.special import ndtri  # Gaussian directions, normalised

    g = ndtri(np.clip(u, 1e-12, 1.0 - 1e-12))
    return g / np.linalg.norm(g, axis=1, keepdims=True)


class Domain:
    """Base class of every domain. Subclasses set ``dim`` and implement the samplers."""

    dim: int
    part_names: tuple[str, ...] = ()

    def sample_interior(self, n: int, rng: np.random.Generator | int | None = None,
                        method: str = "uniform") -> NDArray[np.float64]:
        raise NotImplementedError

    def sample_boundary(self, n: int, rng: np.random.Generator | int | None = None,
                        method: str = "uniform") -> BoundarySample:
        raise NotImplementedError

    def contains(self, x: ArrayLike) -> NDArray[np.bool_]:
        """True for points of the closed domain."""
        raise NotImplementedError

    @property
    def bounds(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """(lo, hi) of the bounding box."""
        raise NotImplementedError

    def boundary_distance(self, x: ArrayLike) -> NDArray[np.float64] | None:
        """The distance [N] from points x [N, d] of the closed domain to its boundary (None
        where a domain does not say: the base class)."""
        return None

    def reentrant_corners(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(points [m, d], sizes [m])``: the corners of the boundary where the domain's own
        angle exceeds π (an L-shaped polygon's inner corner, a polygonal obstacle's vertices
        seen from outside), at which a Helmholtz solution is singular (``u ~ r^(π/α)``, α the
        domain's angle: its gradient unbounded), and for each the length of its shorter edge.
        Empty here: a box, a ball and a point cloud have none."""
        return np.empty((0, self.dim)), np.empty(0)

    @property
    def volume(self) -> float:
        raise NotImplementedError

    def grid(self, n_per_dim: int) -> tuple[NDArray[np.float64], tuple[int, ...], NDArray[np.bool_]]:
        """A regular grid over the bounding box: ``(x [N, d] of grid points inside the domain,
        grid shape, mask over the full grid)``. The full grid is ``meshgrid(..., indexing="ij")``."""
        lo, hi = self.bounds
        axes = [np.linspace(lo[i], hi[i], n_per_dim) for i in range(self.dim)]
        mesh = np.meshgrid(*axes, indexing="ij")
        pts = np.stack([m.ravel() for m in mesh], axis=1)
        mask = self.contains(pts)
        return np.ascontiguousarray(pts[mask]), mesh[0].shape, mask


class Box(Domain):
    """The box ``[lo_0, hi_0] x ... x [lo_{d-1}, hi_{d-1}]`` in any dimension d >= 1."""

    def __init__(self, lo: ArrayLike, hi: ArrayLike):
        lo = np.atleast_1d(np.asarray(lo, dtype=np.float64))
        hi = np.atleast_1d(np.asarray(hi, dtype=np.float64))
        if lo.ndim != 1 or lo.shape != hi.shape or lo.size == 0:
            raise ValueError(f"Box: lo and hi must be 1-D of the same length, got {lo.shape} and {hi.shape}")
        if not np.all(hi > lo):
            raise ValueError(f"Box: need hi > lo in every dimension, got lo={lo}, hi={hi}")
        self.lo, self.hi = lo, hi
        self.dim = lo.size
        names = []
        for i in range(self.dim):
            axis = "xyz"[i] if i < 3 else f"x{i}"
            names += [f"{axis}min", f"{axis}max"]
        self.part_names = tuple(names)

    def __repr__(self) -> str:
        return f"Box(lo={self.lo.tolist()}, hi={self.hi.tolist()})"

    @property
    def bounds(self):
        return self.lo.copy(), self.hi.copy()

    @property
    def volume(self) -> float:
        return float(np.prod(self.hi - self.lo))

    def contains(self, x):
        x = np.asarray(x, dtype=np.float64).reshape(-1, self.dim)
        tol = 1e-12 * np.max(self.hi - self.lo)
        return np.all((x >= self.lo - tol) & (x <= self.hi + tol), axis=1)

    def boundary_distance(self, x):
        x = np.asarray(x, dtype=np.float64).reshape(-1, self.dim)
        return np.min(np.abs(np.concatenate([x - self.lo, self.hi - x], axis=1)), axis=1)

    def sample_interior(self, n, rng=None, method="uniform"):
        u = sample_unit_cube(n, self.dim, _as_rng(rng), method)
        return self.lo + u * (self.hi - self.lo)

    def face_areas(self) -> NDArray[np.float64]:
        """Measure of each face, in part_names order (each end point of an interval counts 1)."""
        ext = self.hi - self.lo
        areas = []
        for i in range(self.dim):
            a = float(np.prod(np.delete(ext, i))) if self.dim > 1 else 1.0
            areas += [a, a]
        return np.asarray(areas)

    def sample_boundary(self, n, rng=None, method="uniform"):
        rng = _as_rng(rng)
        counts = _split_counts(int(n), self.face_areas())
        xs, ns, ps = [], [], []
        for face, c in enumerate(counts):
            axis, side = divmod(face, 2)
            if c == 0:
                continue
            if self.dim > 1:
                u = sample_unit_cube(c, self.dim - 1, rng, method)
                u = np.insert(u, axis, 0.0, axis=1)
            else:
                u = np.zeros((c, 1))
            x = self.lo + u * (self.hi - self.lo)
            x[:, axis] = self.hi[axis] if side else self.lo[axis]
            nrm = np.zeros((c, self.dim))
            nrm[:, axis] = 1.0 if side else -1.0
            xs.append(x)
            ns.append(nrm)
            ps.append(np.full(c, self.part_names[face]))
        return _concat(xs, ns, ps, self.dim)


class Interval(Box):
    """The interval ``[a, b]``; its end points are the parts ``"xmin"`` (a) and ``"xmax"`` (b)."""

    def __init__(self, a: float = 0.0, b: float = 1.0):
        super().__init__([a], [b])

    def __repr__(self) -> str:
        return f"Interval({self.lo[0]}, {self.hi[0]})"


class Ball(Domain):
    """The closed ball ``|x - center| <= radius`` in any dimension (a disk in 2-D)."""

    part_names = ("sphere",)

    def __init__(self, center: ArrayLike, radius: float):
        self.center = np.atleast_1d(np.asarray(center, dtype=np.float64))
        if self.center.ndim != 1 or self.center.size == 0:
            raise ValueError(f"Ball: center must be a 1-D point, got shape {self.center.shape}")
        self.radius = float(radius)
        if not self.radius > 0:
            raise ValueError(f"Ball: radius must be > 0, got {radius}")
        self.dim = self.center.size

    def __repr__(self) -> str:
        return f"Ball(center={self.center.tolist()}, radius={self.radius})"

    @property
    def bounds(self):
        return self.center - self.radius, self.center + self.radius

    @property
    def volume(self) -> float:
        d = self.dim
        return math.pi ** (d / 2) / math.gamma(d / 2 + 1) * self.radius**d

    @property
    def surface(self) -> float:
        d = self.dim
        return 2 * math.pi ** (d / 2) / math.gamma(d / 2) * self.radius ** (d - 1)

    def contains(self, x):
        x = np.asarray(x, dtype=np.float64).reshape(-1, self.dim)
        return np.linalg.norm(x - self.center, axis=1) <= self.radius * (1 + 1e-12)

    def boundary_distance(self, x):
        x = np.asarray(x, dtype=np.float64).reshape(-1, self.dim)
        return np.abs(np.linalg.norm(x - self.center, axis=1) - self.radius)

    def sample_interior(self, n, rng=None, method="uniform"):
        d = self.dim
        if d == 1:
            return self.center + self.radius * (2 * sample_unit_cube(n, 1, _as_rng(rng), method) - 1)
        u = sample_unit_cube(n, 1 + _sphere_coords(d), _as_rng(rng), method)
        direction = _unit_vectors(u[:, 1:], d)
        r = self.radius * u[:, :1] ** (1.0 / d)  # uniform in volume
        return self.center + r * direction

    def sample_boundary(self, n, rng=None, method="uniform"):
        n = int(n)
        if self.dim == 1:
            # Two end points: split evenly, as a Box does.
            x = Box(self.center - self.radius, self.center + self.radius).sample_boundary(n, rng, method)
            return BoundarySample(x.x, x.normals, np.full(n, "sphere"))
        u = sample_unit_cube(n, _sphere_coords(self.dim), _as_rng(rng), method)
        nrm = _unit_vectors(u, self.dim)
        return BoundarySample(self.center + self.radius * nrm, nrm, np.full(n, "sphere"))


def Disk(center: ArrayLike = (0.0, 0.0), radius: float = 1.0) -> Ball:
    """A 2-D ball."""
    ball = Ball(center, radius)
    if ball.dim != 2:
        raise ValueError(f"Disk: center must have 2 coordinates, got {ball.dim}")
    return ball


class Polygon(Domain):
    """A closed simple polygon in 2-D, given by its ``vertices [n, 2]`` (n >= 3, in either
    order; kept counter-clockwise in :attr:`vertices`). Its boundary is the part ``"polygon"``;
    boundary points are uniform in arc length along the edges, each with the outward unit normal
    of its edge (at a corner itself, the normal of the edge that starts there)."""

    part_names = ("polygon",)
    dim = 2

    def __init__(self, vertices: ArrayLike):
        try:
            v = np.array(vertices, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"Polygon: vertices must be an array [n, 2] of numbers, got {vertices!r}") from None
        if v.ndim != 2 or v.shape[1] != 2 or len(v) < 3:
            raise ValueError(f"Polygon: vertices must be [n, 2] with n >= 3, got shape {v.shape}")
        if not np.all(np.isfinite(v)):
            raise ValueError(f"Polygon: vertices must be finite, got {v.tolist()}")
        edge = np.roll(v, -1, axis=0) - v
        length = np.hypot(edge[:, 0], edge[:, 1])
        scale = float(np.max(np.ptp(v, axis=0)))
        if np.any(length <= 1e-12 * max(scale, 1e-300)):
            i = int(np.argmin(length))
            raise ValueError(f"Polygon: vertices {i} and {(i + 1) % len(v)} coincide "
                             f"({v[i].tolist()}); every edge must have a length")
        crossing = _edge_crossing(v)
        if crossing is not None:
            raise ValueError(f"Polygon: vertices must make a simple polygon; edges {crossing[0]} and "
                             f"{crossing[1]} intersect")
        area = 0.5 * float(np.sum(v[:, 0] * np.roll(v[:, 1], -1) - np.roll(v[:, 0], -1) * v[:, 1]))
        if abs(area) <= 1e-12 * scale * scale:
            raise ValueError(f"Polygon: vertices enclose no area (collinear?): {v.tolist()}")
        if area < 0:
            v = v[::-1].copy()
        self.vertices = v
        self._area = abs(area)
        self._edges = np.roll(v, -1, axis=0) - v
        self._lengths = np.hypot(self._edges[:, 0], self._edges[:, 1])
        # a counter-clockwise polygon's outward normal: the edge turned clockwise
        self._normals = np.stack([self._edges[:, 1], -self._edges[:, 0]], axis=1) / self._lengths[:, None] + 0.0

    def __repr__(self) -> str:
        return f"Polygon({self.vertices.tolist()})"

    def corner_mask(self, convex: bool) -> NDArray[np.bool_]:
        """Which vertices have an interior angle below π (``convex``) or above it (reflex;
        straight vertices are neither): the one test of :meth:`corners` and of
        :mod:`helmpinn.problems.corners`."""
        incoming = np.roll(self._edges, 1, axis=0)
        turn = incoming[:, 0] * self._edges[:, 1] - incoming[:, 1] * self._edges[:, 0]   # > 0: a left turn
        tol = 1e-9 * np.roll(self._lengths, 1) * self._lengths
        return turn > tol if convex else turn < -tol

    @property
    def edge_directions(self) -> NDArray[np.float64]:
        """``[n, 2]``: edge j's unit direction, from vertex j to vertex j + 1."""
        return self._edges / self._lengths[:, None]

    @property
    def edge_normals(self) -> NDArray[np.float64]:
        """``[n, 2]``: edge j's outward unit normal."""
        return self._normals.copy()

    def interior_angles(self) -> NDArray[np.float64]:
        """Each vertex's interior angle (radians, in (0, 2π)): from its outgoing edge's direction
        counter-clockwise to its incoming edge's reversed."""
        out = np.empty(len(self.vertices))
        for i, (e_out, e_in) in enumerate(zip(self._edges, np.roll(self._edges, 1, axis=0))):
            out[i] = (math.atan2(-e_in[1], -e_in[0]) - math.atan2(e_out[1], e_out[0])) % (2 * math.pi)
        return out

    def corners(self, convex: bool) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(points, sizes)``: the vertices of :meth:`corner_mask`, each with its shorter edge's length."""
        keep = self.corner_mask(convex)
        size = np.minimum(np.roll(self._lengths, 1), self._lengths)
        return self.vertices[keep].copy(), size[keep]

    def reentrant_corners(self):
        """The reflex vertices (interior angle above π), each with its shorter edge's length."""
        return self.corners(convex=False)

    @property
    def bounds(self):
        return self.vertices.min(axis=0), self.vertices.max(axis=0)

    @property
    def volume(self) -> float:
        return self._area

    @property
    def surface(self) -> float:
        """The perimeter."""
        return float(self._lengths.sum())

    def edge_distances(self, x: ArrayLike) -> NDArray[np.float64]:
        """``[m, edges]``: each point's distance to each edge (edge j from vertex j to j + 1)."""
        x = np.asarray(x, dtype=np.float64).reshape(-1, 2)
        out = np.empty((len(x), len(self.vertices)))
        for j, (a, e, ln) in enumerate(zip(self.vertices, self._edges, self._lengths)):
            t = np.clip(((x - a) @ e) / (ln * ln), 0.0, 1.0)
            out[:, j] = np.linalg.norm(x - a - t[:, None] * e, axis=1)
        return out

    def boundary_distance(self, x):
        return self.edge_distances(x).min(axis=1)

    def contains(self, x):
        """True for points inside or on the polygon (within 1e-12 of its size of an edge)."""
        x = np.asarray(x, dtype=np.float64).reshape(-1, 2)
        inside = np.zeros(len(x), bool)
        for a, e in zip(self.vertices, self._edges):
            b = a + e
            straddle = (a[1] > x[:, 1]) != (b[1] > x[:, 1])
            with np.errstate(divide="ignore", invalid="ignore"):
                at = a[0] + (x[:, 1] - a[1]) * e[0] / e[1]
            inside ^= straddle & (x[:, 0] < at)
        scale = float(np.max(np.ptp(self.vertices, axis=0)))
        return inside | (self.boundary_distance(x) <= 1e-12 * scale)

    def sample_interior(self, n, rng=None, method="uniform"):
        return _rejection(self.bounds, lambda x: self.contains(x), self._area, n, rng, method)

    def sample_boundary(self, n, rng=None, method="uniform"):
        n = int(n)
        s = sample_unit_cube(n, 1, _as_rng(rng), method)[:, 0] * self.surface
        ends = np.cumsum(self._lengths)
        i = np.minimum(np.searchsorted(ends, s, side="right"), len(ends) - 1)
        t = (s - (ends[i] - self._lengths[i])) / self._lengths[i]
        x = self.vertices[i] + t[:, None] * self._edges[i]
        return BoundarySample(np.ascontiguousarray(x), self._normals[i].copy(), np.full(n, "polygon"))


def _edge_crossing(v: NDArray[np.float64]) -> tuple[int, int] | None:
    """The first pair of edges (i, j) of the closed polyline v that touch or cross where they
    should not (non-neighbours that meet, or neighbours that fold back over each other); None
    for a simple polygon."""
    m = len(v)
    a, e = v, np.roll(v, -1, axis=0) - v

    def cross(p, q):
        return p[..., 0] * q[..., 1] - p[..., 1] * q[..., 0]

    for i in range(m):
        for j in range(i + 1, m):
            d = a[j] - a[i]
            den = cross(e[i], e[j])
            neighbours = j == i + 1 or (i == 0 and j == m - 1)
            if abs(den) <= 1e-14 * np.linalg.norm(e[i]) * np.linalg.norm(e[j]):
                # parallel: neighbours fold back when collinear and opposite; others overlap
                # when collinear and their spans along edge i meet
                if abs(cross(d, e[i])) > 1e-12 * np.linalg.norm(e[i]) * (np.linalg.norm(d) + 1e-300):
                    continue
                if neighbours:
                    if e[i] @ e[j] < 0:
                        return i, j
                    continue
                s0 = d @ e[i] / (e[i] @ e[i])
                s1 = s0 + e[j] @ e[i] / (e[i] @ e[i])
                if min(s0, s1) <= 1 and max(s0, s1) >= 0:
                    return i, j
                continue
            s = cross(d, e[j]) / den
            t = cross(d, e[i]) / den
            if neighbours:
                continue   # neighbours not parallel meet only at their shared vertex
            if -1e-12 <= s <= 1 + 1e-12 and -1e-12 <= t <= 1 + 1e-12:
                return i, j
    return None


def _rejection(bounds, keep, volume: float, n, rng, method) -> NDArray[np.float64]:
    """n points uniform in a region of the given volume inside the box ``bounds``, drawn from the
    box and kept where ``keep(x)``; one draw of a quasi-random sequence keeps its structure."""
    rng = _as_rng(rng)
    n = int(n)
    box = Box(*bounds)
    frac = volume / box.volume
    m = int(math.ceil(n / frac * 1.1)) + 16
    while True:
        x = box.sample_interior(m, rng, method)
        x = x[keep(x)]
        if len(x) >= n:
            return np.ascontiguousarray(x[:n])
        m *= 2


class BoxMinusObstacle(Domain):
    """A box with an obstacle (a scatterer: a :class:`Ball`, a :class:`Polygon`, or any bounded
    domain with ``contains``, ``sample_boundary``, ``volume``, ``surface`` and
    ``boundary_distance``) removed; the obstacle must lie strictly inside the box.

    Parts: the box's faces and ``"scatterer"``, whose outward normal (out of the domain) points
    into the obstacle (the obstacle's own outward normal, reversed).
    """

    def __init__(self, box: Box, obstacle: Domain):
        name = type(self).__name__
        if not isinstance(box, Box):
            raise TypeError(f"{name}: box must be a Box, got {type(box).__name__}")
        if not isinstance(obstacle, Domain) or isinstance(obstacle, (Box, PointCloud, BoxMinusObstacle)):
            raise TypeError(f"{name}: obstacle must be a bounded shape such as a Ball or a Polygon, "
                            f"got {type(obstacle).__name__}")
        if box.dim != obstacle.dim or box.dim < 2:
            raise ValueError(f"{name}: box and obstacle need the same dimension >= 2, "
                             f"got {box.dim} and {obstacle.dim}")
        lo, hi = obstacle.bounds
        if np.any(lo <= box.lo) or np.any(hi >= box.hi):
            raise ValueError(f"{name}: the obstacle must lie strictly inside the box "
                             f"{box.lo.tolist()}..{box.hi.tolist()}, it spans {lo.tolist()}..{hi.tolist()}")
        self.box, self.obstacle = box, obstacle
        self.dim = box.dim
        self.part_names = box.part_names + ("scatterer",)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.box!r}, {self.obstacle!r})"

    def with_box(self, box: Box) -> "BoxMinusObstacle":
        """The same obstacle in another box (a PML's outer box)."""
        return BoxMinusObstacle(box, self.obstacle)

    @property
    def bounds(self):
        return self.box.bounds

    @property
    def volume(self) -> float:
        return self.box.volume - self.obstacle.volume

    def contains(self, x):
        """True for points of the closed domain (the obstacle's boundary included)."""
        x = np.asarray(x, dtype=np.float64).reshape(-1, self.dim)
        inner = self.obstacle.contains(x) & (self.obstacle.boundary_distance(x) > 0)
        return self.box.contains(x) & ~inner

    def boundary_distance(self, x):
        return np.minimum(self.box.boundary_distance(x), self.obstacle.boundary_distance(x))

    def reentrant_corners(self):
        """A polygonal obstacle's convex vertices (the domain's angle there exceeds π), each
        with its shorter edge's length; none for a ball."""
        if isinstance(self.obstacle, Polygon):
            return self.obstacle.corners(convex=True)
        return super().reentrant_corners()

    def sample_interior(self, n, rng=None, method="uniform"):
        return _rejection(self.box.bounds, lambda x: ~self.obstacle.contains(x), self.volume, n, rng, method)

    def sample_boundary(self, n, rng=None, method="uniform"):
        rng = _as_rng(rng)
        counts = _split_counts(int(n), [self.box.face_areas().sum(), self.obstacle.surface])
        outer = self.box.sample_boundary(counts[0], rng, method)
        inner = self.obstacle.sample_boundary(counts[1], rng, method)
        return _concat([outer.x, inner.x], [outer.normals, -inner.normals],
                       [outer.parts, np.full(counts[1], "scatterer")], self.dim)


class BoxMinusBall(BoxMinusObstacle):
    """A box with a ball (a scatterer) removed; the ball must lie strictly inside the box
    (:class:`BoxMinusObstacle` with a :class:`Ball`; ``ball`` is the obstacle).

    Parts: the box's faces and ``"scatterer"``, whose outward normal (out of the domain) points
    toward the ball's centre.
    """

    def __init__(self, box: Box, ball: Ball):
        if not isinstance(ball, Ball):
            raise TypeError(f"BoxMinusBall: ball must be a Ball, got {type(ball).__name__}")
        if box.dim != ball.dim or box.dim < 2:
            raise ValueError(f"BoxMinusBall: box and ball need the same dimension >= 2, "
                             f"got {box.dim} and {ball.dim}")
        if np.any(ball.center - ball.radius <= box.lo) or np.any(ball.center + ball.radius >= box.hi):
            raise ValueError("BoxMinusBall: the ball must lie strictly inside the box")
        super().__init__(box, ball)

    @property
    def ball(self) -> Ball:
        return self.obstacle

    def with_box(self, box: Box) -> "BoxMinusBall":
        return BoxMinusBall(box, self.ball)

    def contains(self, x):
        x = np.asarray(x, dtype=np.float64).reshape(-1, self.dim)
        r = np.linalg.norm(x - self.ball.center, axis=1)
        return self.box.contains(x) & (r >= self.ball.radius * (1 - 1e-12))

    def sample_interior(self, n, rng=None, method="uniform"):
        centre, radius = self.ball.center, self.ball.radius
        return _rejection(self.box.bounds, lambda x: np.linalg.norm(x - centre, axis=1) > radius,
                          self.volume, n, rng, method)


class PointCloud(Domain):
    """A domain given by explicit point sets: interior points and boundary points with their
    outward unit normals and (optionally) part labels (default ``"boundary"``).

    ``sample_interior(n)`` / ``sample_boundary(n)`` return a random subset of n points (all of
    them, in their given order, when n is None or at least the number held).
    """

    def __init__(self, interior: ArrayLike, boundary: ArrayLike | None = None,
                 normals: ArrayLike | None = None, parts: ArrayLike | str | None = None):
        self.interior = np.ascontiguousarray(np.asarray(interior, dtype=np.float64))
        if self.interior.ndim != 2:
            raise ValueError(f"PointCloud: interior must be [N, d], got shape {self.interior.shape}")
        self.dim = self.interior.shape[1]
        if boundary is None:
            boundary = np.empty((0, self.dim))
            normals = np.empty((0, self.dim))
        b = np.ascontiguousarray(np.asarray(boundary, dtype=np.float64)).reshape(-1, self.dim)
        if normals is None:
            raise ValueError("PointCloud: boundary points need normals [N, d] (outward, unit)")
        nrm = np.ascontiguousarray(np.asarray(normals, dtype=np.float64))
        if nrm.shape != b.shape:
            raise ValueError(f"PointCloud: normals must have the boundary's shape {b.shape}, got {nrm.shape}")
        for what, arr in (("interior", self.interior), ("boundary", b), ("normals", nrm)):
            if not np.all(np.isfinite(arr)):
                i = int(np.flatnonzero(~np.isfinite(arr).all(axis=1))[0])
                raise ValueError(f"PointCloud: {what} must be finite, got {arr[i].tolist()} at row {i}")
        length = np.linalg.norm(nrm, axis=1)
        if len(b) and not np.allclose(length, 1.0, atol=1e-6):
            raise ValueError("PointCloud: normals must be unit vectors")
        if parts is None:
            parts = "boundary"
        p = np.asarray(parts, dtype=str)
        p = np.full(len(b), p.item()) if p.ndim == 0 else p
        if p.shape != (len(b),):
            raise ValueError(f"PointCloud: parts must be one label or one per boundary point, got shape {p.shape}")
        self.boundary = BoundarySample(b, nrm, p)
        self.part_names = tuple(dict.fromkeys(p.tolist()))

    def __repr__(self) -> str:
        return f"PointCloud({len(self.interior)} interior, {len(self.boundary)} boundary points)"

    @property
    def bounds(self):
        allx = np.concatenate([self.interior, self.boundary.x])
        return allx.min(axis=0), allx.max(axis=0)

    @property
    def volume(self) -> float:
        lo, hi = self.bounds
        return float(np.prod(hi - lo))

    def contains(self, x):
        x = np.asarray(x, dtype=np.float64).reshape(-1, self.dim)
        lo, hi = self.bounds
        return np.all((x >= lo) & (x <= hi), axis=1)

    def boundary_distance(self, x):
        """The distance to the nearest boundary point (inf without boundary points)."""
        x = np.asarray(x, dtype=np.float64).reshape(-1, self.dim)
        out = np.full(len(x), np.inf)
        b = self.boundary.x
        for i in range(0, len(b), 4096):   # [N, 4096] distances at a time
            d = np.linalg.norm(x[:, None, :] - b[None, i:i + 4096], axis=2)
            out = np.minimum(out, d.min(axis=1))
        return out

    def grid(self, n_per_dim):
        raise NotImplementedError("PointCloud has no grid; evaluate on its own points")

    def sample_interior(self, n=None, rng=None, method="uniform"):
        if n is None or n >= len(self.interior):
            return self.interior.copy()
        idx = _as_rng(rng).choice(len(self.interior), size=int(n), replace=False)
        return self.interior[np.sort(idx)]

    def sample_boundary(self, n=None, rng=None, method="uniform"):
        if n is None or n >= len(self.boundary):
            b = self.boundary
            return BoundarySample(b.x.copy(), b.normals.copy(), b.parts.copy())
        idx = _as_rng(rng).choice(len(self.boundary), size=int(n), replace=False)
        mask = np.zeros(len(self.boundary), dtype=bool)
        mask[idx] = True
        return self.boundary.select(mask)


def _concat(xs, ns, ps, d) -> BoundarySample:
    if not xs:
        return BoundarySample(np.empty((0, d)), np.empty((0, d)), np.empty(0, dtype="<U1"))
    return BoundarySample(np.ascontiguousarray(np.concatenate(xs)),
                          np.ascontiguousarray(np.concatenate(ns)),
                          np.concatenate(ps))
