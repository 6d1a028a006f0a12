"""A problem's source ``f``: its terms (callables ``x -> complex [N]`` and
:class:`~helmpinn.problems.sources.PointSource`\\ s, summed), the width a PointSource without one
takes (λ/10 of the local wavelength at it), the share of the PDE points drawn from the
PointSources' Gaussians, and the warnings about a PointSource outside the domain or in or near
a PML. :class:`SourceTerms` holds them for a :class:`~helmpinn.problems.problem.Problem` (whose
``source``, ``point_sources`` and ``source_share`` are its)."""
from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import real_number
from .conditions import complex_values
from .sources import PointSource

__all__ = ["SourceTerms", "SOURCE_PML_WAVELENGTHS"]

#: A PointSource closer than this many (local) wavelengths to a PML gets a warning.
SOURCE_PML_WAVELENGTHS = 0.5


class SourceTerms:
    """The source terms of a problem in ``dim`` dimensions (its ``source`` and ``source_share``
    arguments, checked): ``source`` (one callable, the sum of the terms, or None),
    ``point_sources`` (the PointSources, each given its width from ``medium``'s wavenumbers),
    ``source_share`` (the share of the PDE points drawn at them: 0.25 by default where there
    are PointSources and the points are drawn, ``drawn``; 0 otherwise)."""

    def __init__(self, source: Any, source_share: float | None, *, dim: int, medium: Any, drawn: bool):
        items = list(source) if isinstance(source, (list, tuple)) else ([] if source is None else [source])
        for item in items:
            if not callable(item):
                raise TypeError(f"source must be a callable x -> complex [N], a PointSource or a "
                                f"list of them, got {type(item).__name__}")
            if isinstance(item, PointSource) and item.dim != dim:
                raise ValueError(f"source: a PointSource in {item.dim}-D for a {dim}-D domain")
        if any(isinstance(i, PointSource) and i.width is None for i in items) and not medium.wavenumber > 0:
            raise ValueError("source: a PointSource without a width takes λ/10 from the problem's "
                             "wavenumber, which is 0; give width=")
        items = [i.with_wavenumber(_source_wavenumber(medium, i)) if isinstance(i, PointSource) else i
                 for i in items]
        self.point_sources = [i for i in items if isinstance(i, PointSource)]
        self.terms = items
        self.source = (items[0] if len(items) == 1 else self.summed) if items else None
        if source_share is None:
            source_share = 0.25 if self.point_sources and drawn else 0.0
        self.source_share = real_number("Problem", "source_share", source_share, low=0.0,
                                        low_open=False, high=1.0, high_open=True)
        if self.source_share > 0 and not self.point_sources:
            raise ValueError("source_share: the problem has no PointSource to draw points at")
        if self.source_share > 0 and not drawn:
            raise ValueError("source_share: a PointCloud's points are given, not drawn")

    def summed(self, x: NDArray) -> NDArray[np.complex128]:
        """The sum of the terms at x (the ``source`` of more than one)."""
        return sum(complex_values(term, x) for term in self.terms)

    def at(self, x: NDArray) -> NDArray[np.complex128] | None:
        """f at x (complex [N]), None without a source."""
        return None if self.source is None else complex_values(self.source, x)

    def warn_outside(self, outer: Any, pml: Any, domain: Any) -> None:
        """Warn about a PointSource whose centre lies outside the domain (with a PML: outside
        ``outer``, its outer box): only its Gaussian's tail inside acts, a source the user hardly
        meant (:meth:`warn_near_pml` warns about one in a PML or near it)."""
        for src in self.point_sources:
            x0 = np.asarray(src.position, np.float64)
            if not outer.contains(x0[None, :])[0]:
                lo, hi = (np.asarray(b).tolist() for b in outer.bounds)
                where = f"the PML's outer box {lo} .. {hi}" if pml is not None else repr(domain)
                warnings.warn(f"source: the PointSource at {x0.tolist()} lies outside the domain "
                              f"({where}); only its Gaussian's tail inside acts as a source",
                              UserWarning, stacklevel=3)

    def warn_near_pml(self, outer: Any, box: Any, medium: Any) -> None:
        """Warn about a PointSource in a PML or within half a local wavelength of it (the PML
        surrounds ``box`` inside ``outer``): its near field enters the layer, whose stretching
        then spreads the error over the domain (Marmousi at 3 Hz, source 0.1 wavelength from a
        15-node layer: 3.3e-2 from free space, 5.4e-3 with the source 1.5 wavelengths away;
        docs/benchmarks-archive.md, "A PML in a medium")."""
        if medium.pml is None or not self.point_sources or box is None:
            return
        lo, hi = (np.asarray(b, np.float64) for b in box)
        sides = medium.pml.sides(len(lo))   # the faces with the layer (a free surface is none)
        for src in self.point_sources:
            x0 = np.asarray(src.position, np.float64)
            if not outer.contains(x0[None, :])[0]:
                continue   # outside the domain altogether: warn_outside's warning
            gap = float(np.min(np.concatenate([(x0 - lo)[sides[:, 0]], (hi - x0)[sides[:, 1]]])))
            k = float(medium.local_wavenumber(x0[None, :])[0]) or medium.wavenumber
            if gap < 0:
                warnings.warn(f"source: the PointSource at {x0.tolist()} lies in the PML (outside the "
                              f"physical box {lo.tolist()} .. {hi.tolist()}); the layer is not a "
                              f"physical medium", UserWarning, stacklevel=3)
            elif k > 0 and gap * k / (2 * math.pi) < SOURCE_PML_WAVELENGTHS:
                warnings.warn(f"source: the PointSource at {x0.tolist()} is {gap:.3g} from the PML "
                              f"({gap * k / (2 * math.pi):.2g} local wavelengths); its near field "
                              f"enters the layer and the error spreads over the domain: keep sources "
                              f"{SOURCE_PML_WAVELENGTHS:g} wavelength from a PML (a larger box)",
                              UserWarning, stacklevel=3)


def _source_wavenumber(medium: Any, src: PointSource) -> float:
    """The k whose λ/10 a PointSource without a width takes: in a variable medium the local
    wavenumber at the source (the largest anywhere would make a source in a faster region
    needlessly narrow), the problem's where the medium is constant or evanescent there."""
    if src.width is not None or not callable(medium.kappa):
        return medium.wavenumber
    at = np.asarray(src.position, np.float64)[None, :]
    return float(medium.local_wavenumber(at)[0]) or medium.wavenumber
