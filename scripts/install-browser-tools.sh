#!/usr/bin/env bash
# Install what the "see it run" tests start (tests/ops): Debian's headless chromium with its
# chromedriver (the status page in a real browser) and the Prometheus server with promtool (the
# alert rules against a running writer), plus a font for the page's screenshot.
# Does nothing when all are on PATH. Without apt-get, or without root and sudo, it says so and
# exits 0: those tests then skip, naming the missing program in their skip reason.
set -euo pipefail

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
if [ ${#missing[@]} -eq 0 ]; then
    echo "chromium, chromedriver, prometheus and promtool present"
    exit 0
fi
mapfile -t packages < <(printf '%s\n' "${missing[@]}" | sort -u)
if ! command -v apt-get >/dev/null 2>&1; then
    echo "no apt-get: install ${packages[*]} by hand; the browser and prometheus tests skip" >&2
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "not root and no sudo: install ${packages[*]}; the browser and prometheus tests skip" >&2
        exit 0
    fi
    SUDO="sudo"
fi
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${packages[@]}"
