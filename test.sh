#!/usr/bin/env bash
# Runs every test: the unit tests and the command's tests (with, as root, the
# end-to-end tests in network namespaces) under the race detector, and short
# fuzz runs of the network decoders.
set -euo pipefail
cd "$(dirname "$0")"
export PATH="/usr/local/go/bin:$PATH"

go build ./...
work=$(mktemp -d)
soak=
cleanup() {
  if [ -n "$soak" ]; then kill -TERM "$soak" 2>/dev/null; wait "$soak" 2>/dev/null; fi
  rm -rf "$work"
}
trap cleanup EXIT
# The real binary, built once for every test that runs it (testenv.BuildBinary);
# the least-privilege tests run it as another user.
chmod 755 "$work"
go build -o "$work/scpsvpn" ./cmd/scpsvpn
export SCPSVPN_BINARY="$work/scpsvpn"
# passed LOG TEST...: each test run by name must have run and passed (its
# `--- PASS` line in LOG, from -v output): a renamed test that no longer
# matches would otherwise leave go test nothing to run, and that passes.
passed() {
  local log=$1 name; shift
  for name; do
    grep -q "^--- PASS: $name " "$log" || { echo "test.sh: $name did not run and pass"; exit 1; }
  done
}
# Packages whose state is shared between goroutines run under the race detector.
go test -race -count=1 -timeout 15m ./configs/... ./scps/cc/... ./scps/internal/... ./scps/varint/... \
  ./peers/... ./stack/... ./tunnel/...
# scps itself is sans-IO and single-threaded but for Session (session.go,
# stream.go, deadline.go), whose tests run under the race detector. Its
# simulator tests, most of its run time, run without it: the detector finds
# nothing in one goroutine and slows the simulator about fifteenfold
# (8.5 min instead of 35 s on a loaded 2-core machine).
go test -race -count=1 -timeout 15m -run '^TestSession' ./scps/ | tee "$work/session.log"
! grep -q 'no tests to run' "$work/session.log" || { echo "test.sh: no TestSession* in ./scps"; exit 1; }
go test -count=1 -timeout 15m ./scps/
# Each network-facing decoder gets a short fuzz run beyond its seed corpus.
# Both the run and the minimising of new inputs are bounded by executions,
# not time: when a time budget ends while a worker is busy (minimising, or a
# slow input), go test reports "context deadline exceeded" as a failure
# with no failing input. FUZZTIME=2m (or 1000000x) runs longer.
# Each package's fuzzing build is compiled and linked once and runs each of
# its targets in turn, in the package's directory (its testdata/fuzz
# corpus) with go test's own cache of generated inputs; `go test -fuzz`
# would link it again for every target.
fuzzcache="$(go env GOCACHE)/fuzz/$(go list -m)"
fuzz() { # fuzz ./PKG TARGET
  local bin="$work/fuzz-${1//\//_}.test"
  [ -x "$bin" ] || go test -c -fuzz "^$2\$" -o "$bin" "$1"
  echo "fuzz $1 $2"
  (cd "$1" && "$bin" -test.paniconexit0 -test.timeout 10m -test.run '^$' -test.fuzz "^$2\$" \
     -test.fuzztime "${FUZZTIME:-50000x}" -test.fuzzminimizetime 100x -test.fuzzcachedir "$fuzzcache/${1#./}")
}
# The 3-minute soak (cmd/internal/e2e/soak_test.go) runs
# beside the fuzz runs, which are bounded by executions and time nothing:
# 200 flows over a lossy link with an outage, B killed and restarted,
# SIGHUPs, every byte checked and goroutines and memory flat. Its test
# process is built without the race detector (the endpoints it checks
# never are; the e2e package's code gets it below). Not beside the other
# end-to-end tests, which measure rates and latencies.
go test -c -o "$work/e2e.test" ./cmd/internal/e2e
(cd cmd/internal/e2e && exec env SCPSVPN_SOAK=3m "$work/e2e.test" \
   -test.run '^TestSoak$' -test.count=1 -test.timeout 10m -test.v) >"$work/soak.log" 2>&1 &
soak=$!
while read -r pkg target; do
  fuzz "$pkg" "$target"
done < <(grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+' . \
           | sed -E 's#^\./(.*)/[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]+)#./\1 \2#' | sort -u)
soak_rc=0
wait "$soak" || soak_rc=$?
soak=
grep -Ev ' level=DEBUG ' "$work/soak.log"
[ "$soak_rc" = 0 ] || { echo "the soak failed (exit $soak_rc)"; exit 1; }
passed "$work/soak.log" TestSoak
# The command's packages: the emulator, test bed, demo and bench, and the
# end-to-end tests (namespaces, TUN, the real binary; root only), also under
# the race detector (the endpoint binaries they start are built without it:
# its cost in memory and CPU would change what the tests measure). One
# package at a time: they measure timing and sweep stale namespaces of dead
# runs. TestSoak ran above.
env -u SCPSVPN_SOAK go test -race -p 1 -count=1 -timeout 20m ./cmd/...
# The end-to-end tests that need the in-process emulator at full speed
# skip under the race detector; they run here from the race-free binary.
(cd cmd/internal/e2e && exec "$work/e2e.test" -test.run '^TestWindowGrowsUntold$' -test.count=1 -test.timeout 5m -test.v) \
  >"$work/untold.log" 2>&1 || { grep -Ev ' level=DEBUG ' "$work/untold.log"; exit 1; }
grep -Ev ' level=DEBUG ' "$work/untold.log"
passed "$work/untold.log" TestWindowGrowsUntold

