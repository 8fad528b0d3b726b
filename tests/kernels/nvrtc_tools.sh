#!/bin/sh
# Test fixture: PyPI's nvidia-cuda-nvrtc (NVRTC, no GPU needed) installed into SITE by PYTHON's pip,
# unless it is there already, with an empty SITE/torch/lib beside it: the layout of a torch's
# site-packages, where the doctor's loader looks for the NVRTC the torch wheel brought.
#   nvrtc_tools.sh SITE PYTHON
set -eu
site=$1
python=${2:-python3}
if ! ls "$site"/nvidia/*/lib/libnvrtc.so.* >/dev/null 2>&1; then
  echo "installing nvidia-cuda-nvrtc into $site"
  "$python" -m pip install -q --disable-pip-version-check --no-warn-script-location \
    --target "$site" nvidia-cuda-nvrtc || {
    echo "nvrtc_tools: cannot install nvidia-cuda-nvrtc with $python (no network or no pip?)" >&2
    exit 1
  }
fi
mkdir -p "$site/torch/lib"
ls "$site"/nvidia/*/lib/libnvrtc.so.*
