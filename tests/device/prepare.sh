#!/usr/bin/env bash
# Run HERE (the CPU machine) before a device call: copies into .device/include the headers the
# GPU machine lacks (it has torch, nvcc, cmake and ninja but no Debian dev packages), so the
# device scripts can compile the recorder and the trace library there. `.device/` is ignored by
# git; name it in the device call's `carry`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dest="$root/.device/include"
mkdir -p "$dest"
cp /usr/include/zstd.h /usr/include/zstd_errors.h /usr/include/zlib.h /usr/include/zconf.h "$dest/"
cp -r /usr/include/nlohmann "$dest/"
cp -r /usr/include/CLI "$dest/"
du -sh "$root/.device"
