#!/bin/bash
# Starts one Qdrant peer of the StatefulSet in distributed mode. Every peer announces its own
# stable name (pod name . headless Service) as its p2p URI; peer 0 founds the cluster and every
# other peer joins it through peer 0. A peer that restarts finds its identity in its volume and
# rejoins by itself.
set -euo pipefail
ordinal="${HOSTNAME##*-}"
self="http://${HOSTNAME}.qdrant-headless:6335"
if [[ "$ordinal" == 0 ]]; then
  exec ./entrypoint.sh --uri "$self"
fi
exec ./entrypoint.sh --bootstrap "http://qdrant-0.qdrant-headless:6335" --uri "$self"
