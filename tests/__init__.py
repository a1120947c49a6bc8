"""swjob's test suite (tests/README.md says what lives where).

The suite keeps bytecode whatever PYTHONDONTWRITEBYTECODE says (dev machines and CI images
often set it): without it each pytest worker rewrote and compiled every test module it
collected (10 s of CPU per worker instead of 4.7) and every process the tests start
compiled its imports again. Set here, in the package every test module imports first,
and for the processes the suite starts. (Written under __pycache__/, as git ignores.)
"""

from __future__ import annotations

import os
import sys

sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
