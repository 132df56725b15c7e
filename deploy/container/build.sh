#!/usr/bin/env bash
# Builds the spotdnn image from the repository root. IMAGE overrides the name and tag; the
# Kubernetes manifests in deploy/k8s reference the default, spotdnn:<project version>.
# Usage: deploy/container/build.sh [extra docker build arguments]
set -euo pipefail
cd "$(dirname "$0")/../.."
image=${IMAGE:-spotdnn:0.1.0}
docker build -f deploy/container/Dockerfile -t "$image" "$@" .
echo "built $image"
