#!/usr/bin/env bash
# The Debian packages the test suite uses, installed when missing and possible (root or passwordless sudo + apt-get):
#   bubblewrap — the jail for the agent and the policy's programs (evo/confine.py); tests that need it skip without it
#   chromium   — the headless browser tests/report/test_page.py opens `evo report`'s page in; it skips without it
# Where they cannot be installed, this says so and returns 0: the suite still runs, with those tests skipped.
set -uo pipefail
sudo=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; else sudo="none"; fi
fi
updated=""
for pair in bwrap:bubblewrap chromium:chromium; do
    cmd="${pair%%:*}"; pkg="${pair##*:}"
    command -v "$cmd" >/dev/null 2>&1 && continue
    if [ "$sudo" = none ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "system_deps: $pkg is not installed and cannot be installed here (needs root and apt-get); the tests that need it skip" >&2
        continue
    fi
    if [ -z "$updated" ]; then $sudo apt-get update -qq && updated=1; fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$pkg" >/dev/null \
        || echo "system_deps: apt-get install $pkg failed; the tests that need it skip" >&2
done
exit 0
