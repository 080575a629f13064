import sys
from pathlib import Path

# --import-mode=importlib does not put test folders on sys.path; the shared fakes live here.
sys.path.insert(0, str(Path(__file__).parent))
