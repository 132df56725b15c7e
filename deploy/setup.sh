#!/usr/bin/env bash
# Installs every Debian 12 package spotdnn's build, tests and benchmarks need. Idempotent: running
# it again installs nothing new. Run as root (or with sudo available).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev libcurl4-openssl-dev libssl-dev libsqlite3-dev
  libceres-dev libeigen3-dev
  libxml2-dev libcpp-httplib-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  clang-14 libclang-rt-14-dev
  libyaml-cpp-dev
  libpq-dev postgresql
  python3 python3-torch python3-sklearn python3-numpy
)

sudo_cmd=()
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "setup.sh: run as root or install sudo" >&2; exit 1; }
  sudo_cmd=(sudo)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup.sh: all ${#packages[@]} packages already installed"
  exit 0
fi

echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# The PostgreSQL server is for the tests, which start their own in a temporary folder: installing
# it must not also create (and on systemd start) a system cluster on port 5432. An existing
# cluster is left as it is; `pg_createcluster 15 main --start` makes one for `--store`.
if [ ! -d /etc/postgresql ]; then
  "${sudo_cmd[@]}" mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" |
    "${sudo_cmd[@]}" tee /etc/postgresql-common/createcluster.d/50-spotdnn-no-main-cluster.conf \
      >/dev/null
fi
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
