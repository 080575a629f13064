import shutil
import sys
from pathlib import Path

# verifiers' null harness builds its program with uv; prl spawns env servers with this
# Python's bin directory first on PATH, so a uv installed in the venv is found there.
if shutil.which("uv", path=str(Path(sys.executable).parent)) is None and shutil.which("uv") is None:
    collect_ignore = ["test_verifiers_real.py"]
