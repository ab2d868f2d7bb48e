#!/usr/bin/env bash
# Runs every test: unit tests with the race detector, short fuzz runs of the
# network decoders, and (as root) the end-to-end tests in network namespaces.
set -euo pipefail
cd "$(dirname "$0")"
export PATH="/usr/local/go/bin:$PATH"

go build ./...
# Packages whose state is shared between goroutines run under the race detector.
go test -race -count=1 -timeout 15m ./configs/... ./scps/... ./peers/... ./stack/... ./tunnel/...
# Each network-facing decoder gets a short fuzz run beyond its seed corpus.
# Minimising a new input is bounded by executions, not time: a heavy target
# (scps FuzzReceive) could otherwise still be minimising when the fuzz time
# ends, which go test reports as a failure ("context deadline exceeded").
fuzz() { go test -run '^$' -fuzz "^$2\$" -fuzztime "${FUZZTIME:-10s}" -fuzzminimizetime 100x "$1"; }
while read -r pkg target; do
  fuzz "$pkg" "$target"
done < <(grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+' . \
           | sed -E 's#^\./(.*)/[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]+)#./\1 \2#' | sort -u)
# End-to-end tests (namespaces, TUN, the real binary): root only. One package
# at a time: they measure timing and sweep stale namespaces of dead runs.
go test -p 1 -count=1 -timeout 20m ./cmd/...
