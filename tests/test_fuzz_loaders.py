"""Property-based fuzzing (hypothesis) of the GridField loaders on malformed files (issue 61,
"Also"): ``.npy`` with a cut, a flipped byte, a header claiming another shape or dtype; ``.mat``
(v5, compressed or not) cut or with flipped bytes; SEG-Y cut or with another sample count or
format in its binary header (read by a stand-in for the optional segyio package).

A load may only return a GridField of finite values or raise ValueError or TypeError whose
message names the file; nothing else (no IndexError, MemoryError, struct.error, zlib.error,
RuntimeError), and it allocates at most a few MB beyond the file's size (tracemalloc's peak).
"""
from __future__ import annotations

import io
import tracemalloc

import numpy as np
import scipy.interpolate  # noqa: F401 - imported before any load is measured
import scipy.io  # noqa: F401
import scipy.sparse  # noqa: F401
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hostile_data import _segy, fake_segyio  # noqa: F401 - the fixture, used by name

from helmpinn.problems.media import GridField

FEW = settings(max_examples=25, deadline=None, derandomize=True,
               suppress_health_check=[HealthCheck.function_scoped_fixture])   # fake_segyio: stateless
BOUND = 8 * 2**20   # bytes a load may allocate beyond the file's size


def _mutate(draw, data: bytes, header: int) -> bytes:
    """``data`` cut, with a byte flipped (in the first ``header`` bytes half the time), with
    junk appended, or as is."""
    kind = draw(st.sampled_from(["cut", "flip", "flip", "append", "none"]))
    if kind == "cut":
        return data[: draw(st.integers(0, max(len(data) - 1, 0)))]
    if kind == "flip" and data:
        top = min(header, len(data)) if draw(st.booleans()) else len(data)
        i = draw(st.integers(0, top - 1))
        return data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1:]
    if kind == "append":
        return data + draw(st.binary(min_size=1, max_size=64))
    return data


GridField(np.ones((4, 4)))   # the spline code's first use, before any load is measured


def _load(loader, path, *args, **kwargs):
    """Load under tracemalloc; check the outcome and the memory bound."""
    size = path.stat().st_size
    tracemalloc.start()
    try:
        field = loader(path, *args, **kwargs)
    except (ValueError, TypeError) as exc:
        assert path.name in str(exc), f"{type(exc).__name__} without the file's name: {exc}"
        field = None
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < size * 4 + BOUND, f"{peak:,} bytes allocated for a file of {size:,}"
    if field is not None:
        assert np.all(np.isfinite(field.values))


@FEW
@given(data=st.data())
def test_fuzz_from_npy(tmp_path_factory, data):
    draw = data.draw
    dtype = draw(st.sampled_from(["<f8", ">f4", "<i4", "<c16", "|b1", "<U3"]))
    shape = draw(st.sampled_from([(6, 5), (4, 4, 4), (7,), (2, 9)]))
    buf = io.BytesIO()
    values = np.arange(int(np.prod(shape))).reshape(shape) % 7 + 1
    np.save(buf, values.astype(dtype))
    raw = buf.getvalue()
    if draw(st.booleans()):   # a header that claims another shape or dtype over the same data
        header = {"descr": draw(st.sampled_from(["<f8", "<f2", "|O", "<V8", "<u8"])), "fortran_order":
                  draw(st.booleans()), "shape": draw(st.sampled_from([(10**5, 10**5), (6, 5), (0, 4), (2**62,)]))}
        head = io.BytesIO()
        np.lib.format.write_array_header_1_0(head, header)
        raw = head.getvalue() + raw[128:]
    path = tmp_path_factory.mktemp("npy") / "field.npy"
    path.write_bytes(_mutate(draw, raw, 128))
    _load(GridField.from_npy, path)


@FEW
@given(data=st.data())
def test_fuzz_from_mat(tmp_path_factory, data):
    from scipy import io as sio

    draw = data.draw
    buf = io.BytesIO()
    variables = {"v": np.arange(30.0).reshape(5, 6) + 1}
    if draw(st.booleans()):
        variables["name"] = "model"
    sio.savemat(buf, variables, do_compression=draw(st.booleans()))
    path = tmp_path_factory.mktemp("mat") / "field.mat"
    path.write_bytes(_mutate(draw, buf.getvalue(), 200))
    _load(GridField.from_mat, path, "v")


@FEW
@given(data=st.data())
def test_fuzz_from_segy(tmp_path_factory, fake_segyio, data):  # noqa: F811 - the fixture
    draw = data.draw
    folder = tmp_path_factory.mktemp("segy")
    path = _segy(folder / "model.sgy", np.arange(40.0).reshape(5, 8) + 1500.0)
    raw = bytearray(path.read_bytes())
    field = draw(st.sampled_from(["ns", "format", "none"]))
    if field != "none":   # the binary header's sample count or format
        at = 3220 if field == "ns" else 3224
        raw[at:at + 2] = draw(st.integers(-2**15, 2**15 - 1)).to_bytes(2, "big", signed=True)
    path.write_bytes(_mutate(draw, bytes(raw), 3600))
    _load(GridField.from_segy, path, spacing=(10.0, 5.0))
