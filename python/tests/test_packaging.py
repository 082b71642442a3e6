"""`pip install ./python` in the build tree gives a fresh venv (--system-site-packages, for
Debian's grpc, protobuf and numpy) a complete package: the library the build made beside it.
(`cmake --install` is checked by tests/install/install_test.sh.)"""

import os
import subprocess
import venv

import pytest

CHECK = """
import os, sys
import numpy as np
import fusetune
from fusetune import _capi
print(fusetune.__version__)
assert fusetune.__file__.startswith(sys.prefix), fusetune.__file__
assert _capi._library_path().startswith(sys.prefix), _capi._library_path()
q = np.ones((1, 4, 2, 32), np.float32)
assert abs(float(fusetune.attention(q, q, q).sum()) - 256.0) < 1e-3
from fusetune.proto import fusetune_pb2_grpc  # the stubs came along
print(fusetune.Client.__name__)
"""


def test_pip_install_from_the_build_tree_into_a_fresh_venv(tmp_path):
    build = os.environ.get("FUSETUNE_BUILD_DIR")
    if not build or not os.path.exists(os.path.join(build, "python", "fusetune", "_build.py")):
        pytest.skip("no staged package: set FUSETUNE_BUILD_DIR to a built tree (ctest does)")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FUSETUNE_CAPI_LIBRARY")}
    env["PIP_NO_INDEX"] = "1"  # offline: everything comes from the build tree and Debian's packages
    subprocess.run([python, "-m", "pip", "install", "--quiet", "./python"], cwd=build, env=env, check=True)
    version = open(os.path.join(build, "python", "fusetune", "_build.py")).read().split('__version__ = "')[1]
    version = version.split('"')[0]
    out = subprocess.run([python, "-c", CHECK], cwd=str(tmp_path), env=env, check=True,
                         stdout=subprocess.PIPE).stdout.decode().split()
    assert out == [version, "Client"]
