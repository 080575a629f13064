#!/bin/sh
# Installs what the real-SLURM tests of prl-launcher-slurm need (Debian/Ubuntu, as root):
# the SLURM controller, node daemon and client commands, and munge for their auth. The
# tests start the daemons themselves from a generated slurm.conf (tests/conftest.py).
# `make setup` runs this when sbatch or slurmd is missing; it does nothing otherwise.
set -e
if command -v sbatch >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "prl: skipping SLURM install (needs root and apt-get); the real-SLURM tests will be skipped" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
echo "prl: installed slurmctld, slurmd, slurm-client and munge"
