"""``helmpinn invert``'s options and the files it writes into its output folder."""
from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_parser", "parser", "RESULT", "OUTPUTS", "FIGURE", "REPORT", "VELOCITY", "DEFAULT_TIME_LIMIT", "DEFAULT_OUT"]

#: The result file of each method.
RESULT = {"pinn": "inversion.npz", "fwi": "fwi.npz"}
FIGURE, REPORT, STOPPED_REPORT, VELOCITY = "inversion.png", "metrics.json", "interrupted-metrics.json", \
    "velocity.npy"
#: Every file ``helmpinn invert`` may write into its folder (and so replace or remove there);
#: interrupted-metrics.json is no longer written (a stopped run writes its result), but one left
#: by an earlier version is removed with the previous run's files.
OUTPUTS = (*RESULT.values(), VELOCITY, REPORT, FIGURE, STOPPED_REPORT)
DEFAULT_TIME_LIMIT = 300.0
DEFAULT_OUT = "helmpinn-inversion"


def add_parser(sub: Any) -> None:
    """Register ``helmpinn invert`` on the subparsers ``sub`` of helmpinn's parser."""
    p = sub.add_parser("invert", help="recover the velocity from a survey's data (helmpinn.invert or "
                                      "the classical FWI baseline) and write a report",
                       description="Inputs on a grid are .npy arrays (axis j is x_j) with the grid's "
                                   "--origin and --spacing. See docs/guide/inversion-cli.md.")
    p.add_argument("--survey", metavar="FILE.npz", help="the survey (helmpinn.Survey.save); required")
    p.add_argument("--initial", metavar="FILE.npy", help="the starting velocity on the grid --origin, --spacing")
    p.add_argument("--initial-velocity", metavar="V", type=float, help="a homogeneous starting velocity "
                   "(instead of --initial; --domain is then required)")
    p.add_argument("--origin", metavar="X", type=float, nargs="+", help="the grid's first node (default 0)")
    p.add_argument("--spacing", metavar="H", type=float, nargs="+", help="the grid's node spacing (one "
                   "number, or one per axis)")
    p.add_argument("--domain", metavar="X", type=float, nargs="+", help="the physical box lo_0 .. lo_d hi_0 "
                   ".. hi_d, e.g. 0 0 1 1 (default: the --initial grid's box)")
    p.add_argument("--pml", metavar="WIDTH", type=float, default=0.0, help="a PML this wide around the box "
                   "(0: first-order absorbing faces instead)")
    p.add_argument("--pml-faces", metavar="FACE", nargs="+", help="the faces that carry the PML, by the box's "
                   "part names (xmin xmax ymin ymax ...; default: every face but the free surface the survey "
                   "file records, if any); a face left out is a free surface, u = 0 (e.g. --pml-faces xmin "
                   "xmax ymax for a surface at y = lo, z the depth)")
    p.add_argument("--bounds", metavar=("VMIN", "VMAX"), type=float, nargs=2,
                   help="velocity bounds; they must contain the initial model (required with --method fwi)")
    p.add_argument("--method", choices=tuple(RESULT), default="pinn", help="pinn: helmpinn.invert; fwi: the "
                   "classical adjoint-state FWI (helmpinn.reference.fwi) on the same inputs")
    p.add_argument("--true", metavar="FILE.npy", help="the true velocity on the grid --origin, --spacing, "
                   "for the velocity error")
    p.add_argument("--time-limit", metavar="SECONDS", type=float, default=DEFAULT_TIME_LIMIT,
                   help="stop after about this long (default %(default)g)")
    p.add_argument("--max-steps", type=int, help="LM steps per frequency (pinn; default 50) or L-BFGS-B "
                   "iterations per frequency (fwi; default 50)")
    p.add_argument("--regularization", type=float, help="the medium's gradient regularisation weight "
                   "(default: the method's: 1e-6 for pinn, 1e-4 for fwi)")
    p.add_argument("--regularization-decay", metavar="D", type=float, help="pinn: each frequency stage's "
                   "regularisation weight is the previous stage's times D, in [0, 1] (default: helmpinn.invert's, 0.1)")
    p.add_argument("--network", metavar=("FF", "HIDDEN", "LAYERS"), type=int, nargs=3,
                   help="pinn: every wavefield network's Fourier features, width and hidden layers")
    p.add_argument("--points", type=int, help="pinn: PDE points per wavefield (default: helmpinn.invert's)")
    p.add_argument("--seed", type=int, help="pinn: random seed (default 0)")
    p.add_argument("--out", default=DEFAULT_OUT, help="output folder, locked while the run lasts "
                   "(default %(default)s)")
    p.add_argument("--resume", metavar="DIR", help="continue the pinn run that a signal stopped in DIR, "
                   "with its settings (only --time-limit, --max-steps, --threads, --quiet, --no-plots may be "
                   "given)")
    p.add_argument("--threads", type=int, help="CPU threads (default: OpenMP's)")
    p.add_argument("--no-plots", action="store_true", help="skip the figure")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def parser() -> argparse.ArgumentParser:
    """A parser of ``helmpinn invert`` alone (to read a resumed run's command line, and the
    defaults)."""
    parser = argparse.ArgumentParser(prog="helmpinn", add_help=False)
    add_parser(parser.add_subparsers(dest="command"))
    return parser
