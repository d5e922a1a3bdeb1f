#!/usr/bin/env bash
# First contact with an A2/A3 in one command: build, accuracy on the NPU, 1,000-launch determinism, the
# published shapes against IFA and FIA, an msprof profile when msprof is present, measured vs predicted.
# Options are those of tools/first_contact.py (--help); the exit code is non-zero if any step failed.
set -u
cd "$(dirname "$0")/.." || exit 2
export TORCH_DEVICE_BACKEND_AUTOLOAD=0
exec python tools/first_contact.py "$@"
