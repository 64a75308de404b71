"""setuptools' scratch space (its build/ and egg-info directories) in a temporary directory,
removed when the build ends, so that ``pip install .`` leaves the checkout as it was.

setuptools writes both into the source tree by default, and its setup.cfg takes only fixed
paths; pyproject.toml holds everything else about the package.
"""

import atexit
import shutil
import tempfile

from setuptools import setup

scratch = tempfile.mkdtemp(prefix="fairctl-build-")
atexit.register(shutil.rmtree, scratch, ignore_errors=True)
setup(options={"build": {"build_base": scratch}, "egg_info": {"egg_base": scratch}})
