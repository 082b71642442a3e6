"""Installs the fusetune package staged by the CMake build.

Run in the build tree, where the build put the package with its generated parts (the gRPC
stubs, _build.py) and the C ABI library beside it:

    cd build && pip install ./python

The source folder lacks those parts and is refused with that instruction.
"""

import os
import sys

from setuptools import setup
from setuptools.dist import Distribution

here = os.path.dirname(os.path.abspath(__file__))
build_info = os.path.join(here, "fusetune", "_build.py")
if not os.path.exists(build_info):
    sys.exit("fusetune: this is the source folder; build the project (ci/build.sh or cmake --build), then run "
             "'pip install ./python' in the build folder, where the package is staged with its C ABI library")
info = {}
with open(build_info, encoding="utf-8") as f:
    exec(f.read(), info)  # noqa: S102 - our own generated file: __version__, CAPI_LIBRARY



class WithNativeLibrary(Distribution):
    """The package carries a native library: its wheel is for this platform, not "any"."""

    def has_ext_modules(self):
        return True


setup(
    name="fusetune",
    version=info["__version__"],
    description="Tuned fused-attention kernels: torch/numpy attention, the tuning service client, database reader",
    packages=["fusetune", "fusetune.proto"],
    package_data={"fusetune": [info["CAPI_LIBRARY"]]},
    python_requires=">=3.9",
    zip_safe=False,
    distclass=WithNativeLibrary,
)
