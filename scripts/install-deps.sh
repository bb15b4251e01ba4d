#!/usr/bin/env bash
# Installs what deltafin needs to build and test, from Debian 12's packages.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config nlohmann-json3-dev libcli11-dev
      libfmt-dev liburing-dev libpcre2-dev libutf8proc-dev libgtest-dev libgmock-dev
      libbenchmark-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm (the tokenizer reference tests): Debian's packages unless a
# node that brings its own npm (e.g. NodeSource's) is already there.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi
