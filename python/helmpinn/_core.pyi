"""Type stubs for helmpinn._core, the compiled core (C++ with OpenMP; CUDA when built with it).

Every array argument is checked before any work: dtype (float32 or float64, the same for all
arrays of one call, matching the Workspace), shape, C-contiguity and, for outputs, writability.
A wrong array raises TypeError (dtype) or ValueError (shape, layout) naming the argument and
what was expected. A dtype is compared by value (kind, size, byte order), so arrays that went
through pickle are accepted. The GIL is released while C++ computes. An object of any class
here made by ``Class.__new__`` without ``__init__`` raises TypeError when used.
"""
from typing import Literal, Protocol, TypedDict, overload

import numpy as np
from numpy.typing import NDArray

__version__: str

class BatchLike(Protocol):
    """What batch= takes (helmpinn.Batch is one): the array keywords it holds (and optionally
    "counts"), and its dtype. The core reads nothing else from it."""
    def __helmpinn_batch__(self) -> tuple[dict[str, object], np.dtype]: ...


Float = np.float32 | np.float64
DTypeName = Literal["float32", "float64"]

class ModelSpec:
    """Shape of a Fourier-feature tanh MLP with two outputs (Re u, Im u).

    Parameters live in ONE flat buffer, in the order B [in_dim, ff_dim], W0 [hidden, 2*ff_dim],
    b0 [hidden], W1, b1, ..., W{L} [2, hidden], b{L} [2] (L = num_hidden_layers), row-major.
    ValueError for ff_dim > 2**30 - 1 or more than 2**59 parameters (sizes are overflow-checked).
    """
    def __init__(self, in_dim: int, ff_dim: int, hidden_dim: int, num_hidden_layers: int) -> None: ...
    @property
    def in_dim(self) -> int: ...
    @property
    def ff_dim(self) -> int: ...
    @property
    def hidden_dim(self) -> int: ...
    @property
    def num_hidden_layers(self) -> int: ...
    @property
    def num_params(self) -> int: ...
    @property
    def num_layers(self) -> int: ...
    def layout(self) -> list[tuple[str, tuple[int, ...], int]]:
        """(name, shape, offset) of every tensor in buffer order."""
    def views(self, theta: NDArray[Float]) -> dict[str, NDArray[Float]]:
        """Named zero-copy views ("B", "W0", "b0", ...) of a flat vector of num_params elements."""
    def flops_per_point(self, streams: int) -> float: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...
    def __getstate__(self) -> tuple[int, int, int, int]: ...
    def __setstate__(self, state: tuple[int, int, int, int]) -> None: ...

class DeviceArray:
    """Device memory with __cuda_array_interface__ (v3): the cache views of a CUDA Workspace
    and the outputs forward() allocates there. CuPy, PyTorch and Numba read it zero-copy."""
    @property
    def __cuda_array_interface__(self) -> dict: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> np.dtype: ...
    @property
    def ndim(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def ptr(self) -> int: ...
    @property
    def device(self) -> int: ...
    def copy_to_host(self) -> NDArray[Float]: ...
    def copy_from_host(self, array: NDArray[Float]) -> None:
        """Overwrites the data in place with a host array of the same shape and dtype."""
    @staticmethod
    def from_host(array: NDArray[Float], device: int = 0) -> DeviceArray: ...
    def __len__(self) -> int: ...

# On device="cuda" every array argument may be any object with __cuda_array_interface__ or
# DLPack on the workspace's GPU, `stream` (a CUDA stream handle or an object with .ptr or
# .cuda_stream) orders the call, and the cache properties return DeviceArray views.
Array = NDArray[Float] | DeviceArray

class Workspace:
    """Every buffer one training step needs for `spec` and chunks of `batch_size` points.

    Allocated once; forward() and value_and_grad() take any number of points (walked in chunks
    of batch_size) and allocate nothing in C++. Cache attributes are NumPy views that share
    memory with the C++ buffers and stay valid as long as the Workspace lives; they hold the
    last chunk of the last forward() (value stream unless named *_streams); after
    value_and_grad() their contents are unspecified. Arrays that share memory with these
    caches are refused as arguments (ValueError), except ``grad=ws.grad`` in value_and_grad.

    Threads: the GIL is released while a call computes. One Workspace runs one call at a
    time; a call from another thread while one runs raises RuntimeError. Use one Workspace
    per thread. A host Workspace larger than the machine's memory raises MemoryError (with the
    bytes it needed) before allocating. NaN or Inf coordinates give NaN results, never finite
    ones (check_finite=True raises instead). A Workspace made by ``Workspace.__new__`` without
    ``__init__`` raises TypeError when used.
    """
    def __init__(self, spec: ModelSpec, batch_size: int = 4096, dtype: DTypeName = "float32",
                 device: str = "cpu") -> None: ...
    @property
    def spec(self) -> ModelSpec: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def dtype(self) -> np.dtype: ...
    @property
    def device(self) -> str: ...
    @property
    def memory_bytes(self) -> int: ...
    # caches (views)
    @property
    def x_input(self) -> NDArray[Float]: ...            # [batch, d]
    @property
    def fourier_features(self) -> NDArray[Float]: ...   # [batch, 2m]
    @property
    def fourier_streams(self) -> NDArray[Float]: ...    # [d+2, batch, 2m]
    @property
    def z(self) -> list[NDArray[Float]]: ...            # L+1 arrays [batch, out_l]; z[L] = u
    @property
    def h(self) -> list[NDArray[Float]]: ...            # L+1 arrays [batch, out_l]; h[L] = u
    @property
    def z_streams(self) -> list[NDArray[Float]]: ...    # L+1 arrays [d+2, batch, out_l]
    @property
    def h_streams(self) -> list[NDArray[Float]]: ...    # L+1 arrays [d+2, batch, out_l]
    @property
    def du_dx(self) -> NDArray[Float]: ...              # [batch, d, 2]
    @property
    def d2u_dx2(self) -> NDArray[Float]: ...            # [batch, 2]  (Laplacian)
    @property
    def grad(self) -> NDArray[Float]: ...               # [num_params] accumulator
    @property
    def dW(self) -> list[NDArray[Float]]: ...           # views into grad, [out_l, in_l]
    @property
    def db(self) -> list[NDArray[Float]]: ...           # views into grad, [out_l]
    @property
    def dB(self) -> NDArray[Float]: ...                 # view into grad, [d, m]
    @property
    def last_loss(self) -> dict[str, float]: ...        # {"total","pde","data","bc"} of the last value_and_grad
    def zero_grad(self, *, stream: int | object | None = None) -> None: ...
    @overload
    def forward(self, params: NDArray[Float], x: NDArray[Float], derivatives: Literal[0] = 0, *,
                u: NDArray[Float] | None = None, stream: int | object | None = None) -> NDArray[Float]: ...
    @overload
    def forward(self, params: NDArray[Float], x: NDArray[Float], derivatives: Literal[1], *,
                u: NDArray[Float] | None = None, grad_u: NDArray[Float] | None = None,
                stream: int | object | None = None) -> tuple[NDArray[Float], NDArray[Float]]: ...
    @overload
    def forward(self, params: NDArray[Float], x: NDArray[Float], derivatives: Literal[2], *,
                u: NDArray[Float] | None = None, grad_u: NDArray[Float] | None = None,
                lap_u: NDArray[Float] | None = None, stream: int | object | None = None
                ) -> tuple[NDArray[Float], NDArray[Float], NDArray[Float]]: ...
    # Every loss-level operation (value_and_grad, residuals, jacobian, jvp, vjp) takes the same
    # batch keywords (BatchKw). Its points and data come either as batch= (a helmpinn.Batch,
    # python/helmpinn/problems/batch.py: the arrays below converted once, the same object reused step
    # after step; a Batch of another dtype than the workspace's raises TypeError) or as the
    # keywords themselves; batch= with any of x_pde ... g_bc or counts raises TypeError naming
    # them. The options (w_*, train_fourier, check_finite) are keywords either way. The terms and
    # their keywords are the core's table (loss_terms()):
    #   batch: helmpinn.Batch | None = None
    #   x_pde [N_pde, d], kappa (float or [N_pde]), f [N_pde, 2]        PDE term
    #   a_pde, b_pde (complex or [N_pde, d, 2]), c_pde (complex or [N_pde, 2]): the general
    #     operator r = sum_i a_i u_ii + sum_i b_i u_i + c u - f at the PDE points instead of
    #     lap u + kappa u - f (any of them given selects it; a = 1, b = 0 by default; c_pde or
    #     kappa, a real c, is required with it)
    #   a_lap [N_pde, 2]: one a per point in place of a_pde (r = a lap u + ...; not with a_pde):
    #     the same residual from the Laplacian's d + 2 streams instead of 2d + 1 (also chosen
    #     whenever a_pde is a constant)
    #   x_data [N_data, d], y [N_data, 2]                               data term
    #   x_bc [N_bc, d], n_bc [N_bc, d], alpha_bc (complex or [N_bc, 2]), g_bc [N_bc, 2]   Robin
    #   w_pde, w_data, w_bc: float = 1.0          term weights (>= 0 on the residual level)
    #   counts: {"pde": n, "data": m, "bc": q}   global counts: each mean divides by these
    #                                             instead of the local points (data parallel)
    #   train_fourier: bool = True                False: B frozen, its gradient/columns are 0
    #   check_finite: bool = False                scan inputs (and jvp's v, vjp's w), ValueError
    #                                             naming a NaN/Inf array
    # An unknown keyword raises TypeError naming it. A constant that overflows the workspace's
    # dtype (1e39 in float32) raises ValueError naming it.
    @overload
    def value_and_grad(self, params: NDArray[Float], grad: NDArray[Float], *,
                       grad_kappa: NDArray[Float] | None = None, breakdown: Literal[False] = False,
                       stream: int | object | None = None, batch: BatchLike | None = None,
                       **batch_keywords: object) -> float: ...
    @overload
    def value_and_grad(self, params: NDArray[Float], grad: NDArray[Float], *,
                       grad_kappa: NDArray[Float] | None = None, breakdown: Literal[True],
                       stream: int | object | None = None, batch: BatchLike | None = None,
                       **batch_keywords: object) -> LossBreakdown:
        """Loss of the given terms; writes d(loss)/d(params) into grad (overwritten). With
        grad_kappa [N_pde] also d(loss)/d(kappa_i) at every PDE point (inverse problems);
        with breakdown=True the loss per term comes back with it."""
    # The residual level. r has R = 2 (N_pde + N_data + N_bc) rows: PDE points, then data, then
    # boundary points, each point as (re, im), each scaled by sqrt(w_term / count_term): the
    # loss is exactly r @ r and its gradient 2 J^T r. Outputs are allocated when out is None.
    def residuals(self, params: NDArray[Float], *, out: NDArray[Float] | None = None,
                  stream: int | object | None = None, batch: BatchLike | None = None,
                  **batch_keywords: object) -> NDArray[Float]:
        """r [R]."""
    def jacobian(self, params: NDArray[Float], *, out: NDArray[Float] | None = None,
                 rows: tuple[int, int] | None = None, stream: int | object | None = None,
                 batch: BatchLike | None = None, **batch_keywords: object) -> NDArray[Float]:
        """J = dr/dparams [R, P] (row-major, parameter layout), or rows=(start, stop) of it
        [stop - start, P]: any R in bounded memory, a range at a time."""
    def jvp(self, params: NDArray[Float], v: NDArray[Float], *,
            out: NDArray[Float] | None = None, stream: int | object | None = None,
            batch: BatchLike | None = None, **batch_keywords: object) -> NDArray[Float]:
        """J v [R] for v [P]."""
    def vjp(self, params: NDArray[Float], w: NDArray[Float], *,
            out: NDArray[Float] | None = None, stream: int | object | None = None,
            batch: BatchLike | None = None, **batch_keywords: object) -> NDArray[Float]:
        """J^T w [P] for w [R]."""

class LossBreakdown:
    """The loss of one value_and_grad call: total = w_pde*pde + w_data*data + w_bc*bc, each
    term its unweighted mean over its count (0 when absent). float(b) is b.total; ``terms`` the
    means keyed by the term names of loss_terms() (in its order), and one property per term."""
    @property
    def total(self) -> float: ...
    @property
    def terms(self) -> dict[str, float]: ...           # {"pde": ..., "data": ..., "bc": ...}
    @property
    def pde(self) -> float: ...                        # one property per term of loss_terms()
    @property
    def data(self) -> float: ...
    @property
    def bc(self) -> float: ...
    def __float__(self) -> float: ...
    def as_dict(self) -> dict[str, float]: ...          # {"total": ..., **terms}

# The seed primitives. On NumPy arrays they run on the host, and out= is optional (allocated when
# omitted). On CUDA device arrays (anything with __cuda_array_interface__ or DLPack: CuPy,
# PyTorch, Numba, DeviceArray) they run on the GPU that holds the first array, made current for
# the call, and are enqueued on `stream` (as in Workspace.value_and_grad; None = the legacy
# default stream) without waiting: every array argument must then be a device array on that
# GPU (a host array raises ValueError naming it), and out= is required (ValueError naming out:
# helmpinn allocates no device memory per call). Shapes, dtypes and overlap are checked as for
# host arrays; `stream` with host arrays raises ValueError. Device results are the same bits on
# every run and agree with the host's to rounding. The result is `out` itself.
def mse_backward(pred: Array, target: Array, out: Array | None = None, *,
                 stream: int | object | None = None) -> Array: ...
def layer_backward(dL_dh: Array, h: Array, h_prev: Array, W: Array, apply_tanh_grad: bool,
                   out: tuple[Array, Array, Array] | None = None, *,
                   stream: int | object | None = None) -> tuple[Array, Array, Array]: ...
def fourier_backward(dL_dphi: Array, x: Array, B: Array, out: Array | None = None, *,
                     stream: int | object | None = None) -> Array: ...
def adam_step(params: Array, grad: Array, m: Array, v: Array, step: int, lr: float,
              beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
              weight_decay: float = 0.0, *, stream: int | object | None = None) -> None:
    """One fused Adam(W) step over flat buffers, in place; step counts from 1.

    Raises ValueError (buffers untouched) for step < 1, eps <= 0, beta1 or beta2 outside
    [0, 1), or an lr or weight_decay that is negative or not finite."""

class ArrayEntry(TypedDict):
    keyword: str                        # the batch keyword (and LossInputs field)
    shape: tuple[str | int, ...]        # "N" points, "d" dimensions, 2 a complex value (re, im)
    required: bool                      # needed whenever the term has points
    constant: Literal["real", "complex"] | None   # what may stand in for the array
    operator: bool                      # giving it selects the general operator

class TermEntry(TypedDict):
    term: str                           # "pde", "data", "bc": keys of counts= and LossBreakdown
    weight: str                         # its weight's keyword, "w_pde", ...
    arrays: list[ArrayEntry]            # in order, the term's points first

def parse_device(device: object) -> tuple[str, int]:
    """(kind, id) of a device name: "cpu", "cuda" or "cuda:N"; ValueError naming ``device`` otherwise."""
    ...

def loss_terms() -> list[TermEntry]:
    """The core's loss-term table: every term and its arrays, in order (helmpinn.problems.batch's
    KEYWORDS and TERM_KEYWORDS come from it)."""

def has_openmp() -> bool: ...
def has_cuda() -> bool: ...
def cuda_device_count() -> int: ...
def cuda_device_error() -> str | None: ...
def get_num_threads() -> int: ...
def set_num_threads(n: int) -> None: ...
def cpu_isa() -> str:
    """The CPU kernel set in use: "avx512", "avx2" or "baseline" in a dispatching build (the
    best the processor supports; the environment variable HELMPINN_CPU_ISA forces one), or the
    instruction set of a native build (-DHELMPINN_NATIVE=ON)."""
def cpu_kernel_sets() -> list[str]:
    """The kernel sets compiled in: ["baseline", "avx2", "avx512"] or ["native"]."""
def cholesky_solves(trsv: object, factors: list[np.ndarray], starts: list[int], x: np.ndarray) -> None:
    """x[s_j : s_j + n_j] <- (U_jᵀ U_j)⁻¹ x[s_j : s_j + n_j] in place for every upper Cholesky
    factor U_j (square, Fortran-ordered, x's dtype) at its start s_j, by two calls of ``trsv``
    (``scipy.linalg.cython_blas.__pyx_capi__["strsv"]`` for float32 x, ``"dtrsv"`` for float64)
    a block, the blocks spread over the engine's threads with the GIL released. The blocks must
    not overlap; x outside them is left as it is. ValueError names a bad argument."""
def gram_blocks(syrk: object, blocks: list[np.ndarray], grams: list[np.ndarray]) -> None:
    """grams[j] <- the upper triangle of blocks[j]ᵀ blocks[j] for every C-contiguous block
    [R_j, P_j] (one dtype) into its Fortran-ordered output [P_j, P_j] (the strict lower triangle
    left as it is), by one call of ``syrk`` (``scipy.linalg.cython_blas.__pyx_capi__["ssyrk"]``
    for float32, ``"dsyrk"`` for float64) a block, the blocks spread over the engine's threads
    with the GIL released (call it with the BLAS limited to one thread). The outputs must not
    share memory. ValueError names a bad argument."""
def product_blocks(gemm: object, a: list[np.ndarray], b: list[np.ndarray], out: list[np.ndarray]) -> None:
    """out[j] <- a[j]ᵀ b[j] for every pair of C-contiguous blocks a[j] [m_j, P_j] and b[j]
    [m_j, K_j] (one dtype) into its Fortran-ordered output [P_j, K_j], by one call of ``gemm``
    (``scipy.linalg.cython_blas.__pyx_capi__["sgemm"]`` for float32, ``"dgemm"`` for float64) a
    block, the blocks spread over the engine's threads with the GIL released (call it with the
    BLAS limited to one thread). The outputs must not share memory. ValueError names a bad
    argument."""
