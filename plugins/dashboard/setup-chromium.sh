#!/bin/sh
# Installs what the dashboard's browser test needs (Debian/Ubuntu, as root): Debian's
# chromium and its chromedriver, which Selenium drives headless. `make setup` runs this; it
# does nothing when both are present, and without root or apt-get the test is skipped.
set -e
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "prl: skipping chromium install (needs root and apt-get); the dashboard browser test will be skipped" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
echo "prl: installed chromium and chromium-driver"
