"""Re-record golden learning curves: ``python tests/golden/record.py [ALGO ...]``.

Runs each named golden run (all of ``runs.RUNS`` when none is named), checks that it
learned by its stated margins, and writes ``curves/<algo>.json``. One status line per run.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from runs import CURVES, RUNS, curve_path, execute, learned, passes  # noqa: E402


def record(name: str, cache: Path) -> dict:
    run = RUNS[name]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"golden-{name}-") as tmp:
        curve = execute(name, Path(tmp), cache)
    moved = {signal: learned(values) for signal, values in curve.items()}
    return {
        "algo": name,
        "steps": run.steps,
        "seconds": round(time.monotonic() - started, 1),
        "margins": run.signals,
        "learned": {k: round(v, 4) for k, v in moved.items()},
        "curve": {k: [round(x, 4) for x in v] for k, v in curve.items()},
    }


def main(argv: list[str]) -> int:
    names = argv or list(RUNS)
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        print(f"record.py: unknown golden run(s) {', '.join(unknown)}; known: {', '.join(RUNS)}", file=sys.stderr)
        return 2
    CURVES.mkdir(exist_ok=True)
    failed = []
    with tempfile.TemporaryDirectory(prefix="golden-models-") as cache:  # warm-started models, shared by runs
        for name in names:
            if not record_one(name, Path(cache)):
                failed.append(name)
    return 1 if failed else 0


def record_one(name: str, cache: Path) -> bool:
    """Record ``name``'s run; write its curve only when it learned by its margins."""
    result = record(name, cache)
    ok = all(passes(result["learned"][signal], margin) for signal, margin in result["margins"].items())
    print(f"golden {name}: {result['seconds']}s, learned {result['learned']} (margins {result['margins']})"
          f"{'' if ok else '  <-- below margin, not written'}", flush=True)  # fmt: skip
    if ok:
        curve_path(name).write_text(json.dumps(result, indent=1) + "\n")
    return ok


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
