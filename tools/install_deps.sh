#!/usr/bin/env bash
# Installs halfgrad's build and run dependencies from Debian's packages (run as root, or with sudo).
# Why each one is there: README.md, "Dependencies".
set -euo pipefail
pkgs=(cmake g++ make libeigen3-dev doctest-dev libnifti2-dev libniftiio-dev libznz-dev zlib1g-dev
      nlohmann-json3-dev libcli11-dev libxxhash-dev mricron-data gnuplot-nox libpng-dev clang libomp-dev
      universal-ctags)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
