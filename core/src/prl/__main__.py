"""``python -m prl`` is the ``prl`` command (the launcher uses it for child processes)."""

from prl.cli.main import main

if __name__ == "__main__":
    main()
