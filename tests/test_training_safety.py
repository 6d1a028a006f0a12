"""Training that never loses work: damaged model files, file permissions, the output folder,
Ctrl-C and --resume, diverging runs and CLI misuse (issue 16)."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from helmpinn.cli import main
from helmpinn.model import Model

TINY = ["--hidden", "16", "--layers", "2", "--fourier", "8", "--points", "64", "--eval-every", "10",
        "--quiet", "--no-plots"]


def _saved_model(tmp_path):
    m = Model.create(1, 8, 16, 2, seed=1)
    path = tmp_path / "model.npz"
    m.save(path, optimizer_state={"m": np.ones_like(m.params), "v": np.ones_like(m.params), "step": 3})
    return m, path


# -- damaged model files ---------------------------------------------------------------------
def test_load_truncated_file_names_the_path(tmp_path):
    _, path = _saved_model(tmp_path)
    data = path.read_bytes()
    bad = tmp_path / "truncated.npz"
    for cut in (0, 10, len(data) // 3, len(data) // 2, len(data) - 30, len(data) - 1):
        bad.write_bytes(data[:cut])
        with pytest.raises(ValueError, match=re.escape(str(bad))):
            Model.load(bad)


def test_load_corrupted_file_names_the_path(tmp_path):
    m, path = _saved_model(tmp_path)
    data = bytearray(path.read_bytes())
    at = data.find(m.params.tobytes())  # np.savez stores the arrays uncompressed
    assert at > 0
    data[at + 17] ^= 0xFF  # one flipped byte inside the parameters: a CRC mismatch
    bad = tmp_path / "corrupted.npz"
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=re.escape(str(bad)) + ".*(truncated or corrupted)"):
        Model.load(bad)
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "absent.npz"))):
        Model.load(tmp_path / "absent.npz")
    npy = tmp_path / "params.npy"  # a single array, not an archive
    np.save(npy, m.params)
    with pytest.raises(ValueError, match=re.escape(str(npy)) + ".*not an .npz archive"):
        Model.load(npy)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_save_permissions_follow_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        _, path = _saved_model(tmp_path)
        with open(tmp_path / "plain.txt", "w") as fh:  # what any other output gets
            fh.write("x")
    finally:
        os.umask(old)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask
    assert os.stat(path).st_mode & 0o777 == os.stat(tmp_path / "plain.txt").st_mode & 0o777


def test_failed_save_leaves_no_temporary_file(tmp_path, monkeypatch):
    m, path = _saved_model(tmp_path)
    before = path.read_bytes()

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", boom)
    with pytest.raises(KeyboardInterrupt):
        m.save(path)
    assert os.listdir(tmp_path) == ["model.npz"] and path.read_bytes() == before
