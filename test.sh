#!/usr/bin/env bash
# Runs every test: the unit tests and the command's tests (with, as root, the
# end-to-end tests in network namespaces) under the race detector, and short
# fuzz runs of the network decoders.
#
# In three phases. First, side by side, the unit tests, the transport's
# simulator and handshake flood in virtual time, and the builds of the
# last phase's test binaries: none of them measures time. Then the soak
# beside the fuzz runs, which are bounded by executions and time nothing
# (the soak's flows run over an emulated link in its test process: kept
# from the first phase's load, as before). Last, alone and one package at
# a time, the command's tests: the end-to-end tests among them measure
# rates and latencies against figures taken in the same run, and another
# job beside them would move one figure and not the other.
set -euo pipefail
# Every background job gets a process group of its own, so that cleanup
# ends it with everything it started.
set -m
cd "$(dirname "$0")"
export PATH="/usr/local/go/bin:$PATH"

go build ./...
work=$(mktemp -d)
jobs=() # "NAME PID" of each background job
cleanup() {
  local j
  for j in "${jobs[@]}"; do kill -TERM -- "-${j#* }" 2>/dev/null || true; done
  wait 2>/dev/null || true
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
# start NAME COMMAND...: runs COMMAND (a function, often) in the
# background, its output in $work/NAME.log.
start() {
  local name=$1; shift
  "$@" >"$work/$name.log" 2>&1 &
  jobs+=("$name $!")
}
# finish: waits for every job started, shows each one's output (less the
# endpoints' DEBUG lines), and fails if any job failed.
finish() {
  local j rc failed=0
  for j in "${jobs[@]}"; do
    rc=0
    wait "${j#* }" || rc=$?
    echo "=== ${j% *}"
    grep -Ev ' level=DEBUG ' "$work/${j% *}.log" || true
    [ "$rc" = 0 ] || { echo "test.sh: ${j% *} failed (exit $rc)"; failed=1; }
  done
  jobs=()
  return "$failed"
}

# --- Phase 1: nothing here measures time.

# Every package but scps and the command's, under the race detector, in
# one go test (its packages run side by side); then scps' Session
# (session.go, stream.go, deadline.go), the one part of the sans-IO,
# single-threaded transport that goroutines share.
unit() {
  go test -race -count=1 -timeout 15m $(go list ./... | grep -v -e '^scpsvpn/scps$' -e '^scpsvpn/cmd/')
  go test -race -count=1 -timeout 15m -run '^TestSession' ./scps/ | tee "$work/session.out"
  ! grep -q 'no tests to run' "$work/session.out" || { echo "test.sh: no TestSession* in ./scps"; exit 1; }
}
# In virtual time, without the race detector: it finds nothing in one
# goroutine and slows the simulator about fifteenfold (8.5 min instead of
# 35 s). scps' simulator; and the handshake flood at the full figure of
# docs/reliability.md (20,000 initiations a second for 5 minutes; the run
# under the race detector above floods 250 a second).
virtual() {
  go test -count=1 -timeout 15m ./scps/
  go test -count=1 -timeout 15m -run '^TestHandshakeFloodFromSpoofedSources$' -v ./peers/ >"$work/hsflood.out"
  cat "$work/hsflood.out"
  passed "$work/hsflood.out" TestHandshakeFloodFromSpoofedSources
}
# Each network-facing decoder gets a short fuzz run beyond its seed corpus.
# Both the run and the minimising of new inputs are bounded by executions,
# not time: when a time budget ends while a worker is busy (minimising, or a
# slow input), go test reports "context deadline exceeded" as a failure
# with no failing input. FUZZTIME=2m (or 1000000x) runs longer.
# Each package's fuzzing build is compiled and linked once (in the first
# phase) and runs each of its targets in turn, in the package's directory
# (its testdata/fuzz corpus) with go test's own cache of generated inputs;
# `go test -fuzz` would link it again for every target.
fuzzcache="$(go env GOCACHE)/fuzz/$(go list -m)"
fuzzbin() { echo "$work/fuzz-${1//\//_}.test"; } # fuzzbin ./PKG
fuzz() { # fuzz ./PKG TARGET
  echo "fuzz $1 $2"
  (cd "$1" && "$(fuzzbin "$1")" -test.paniconexit0 -test.timeout 10m -test.run '^$' -test.fuzz "^$2\$" \
     -test.fuzztime "${FUZZTIME:-50000x}" -test.fuzzminimizetime 100x -test.fuzzcachedir "$fuzzcache/${1#./}")
}
fuzztargets=$(grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+' . \
  | sed -E 's#^\./(.*)/[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]+)#./\1 \2#' | sort -u)

start unit unit
start virtual virtual
# Meanwhile the builds: the last phase's test binaries, under the race
# detector; the e2e package's without it (for the soak and
# TestWindowGrowsUntold); the endpoint with it; each package's fuzzing
# build.
mkdir "$work/race"
cmdpkgs=$(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}:{{.Dir}}{{end}}' ./cmd/...)
for p in $cmdpkgs; do
  go test -race -c -o "$work/race/$(basename "${p%%:*}").test" "${p%%:*}"
done
go test -c -o "$work/e2e.test" ./cmd/internal/e2e
go build -race -o "$work/scpsvpn-race" ./cmd/scpsvpn # the reload tests' endpoints, at the end
while read -r pkg target; do
  [ -x "$(fuzzbin "$pkg")" ] || go test -c -fuzz "^$target\$" -o "$(fuzzbin "$pkg")" "$pkg"
done <<<"$fuzztargets"
finish

# --- Phase 2: the soak beside the fuzz runs.

# The 3-minute soak (cmd/internal/e2e/soak_test.go): 200 flows over a lossy
# link with an outage, B killed and restarted, SIGHUPs, every byte checked
# and goroutines and memory flat. Its test process is built without the
# race detector (the endpoints it checks never are; the e2e package's code
# gets it below).
soak() {
  (cd cmd/internal/e2e && exec env SCPSVPN_SOAK=3m "$work/e2e.test" \
     -test.run '^TestSoak$' -test.timeout 10m -test.v)
  passed "$work/soak.log" TestSoak
}
start soak soak

while read -r pkg target; do
  fuzz "$pkg" "$target"
done <<<"$fuzztargets"
finish

# --- Phase 3: the command's packages, alone, one at a time.

# The emulator, test bed, demo and bench, and the end-to-end tests
# (namespaces, TUN, the real binary; root only), under the race detector
# (the endpoint binaries they start are built without it: its cost in
# memory and CPU would change what the tests measure). One package at a
# time: they measure timing and sweep stale namespaces of dead runs.
# TestSoak ran above.
for p in $cmdpkgs; do
  t0=$SECONDS
  if (cd "${p#*:}" && exec env -u SCPSVPN_SOAK "$work/race/$(basename "${p%%:*}").test" \
        -test.paniconexit0 -test.timeout 20m) >"$work/cmd.log" 2>&1; then
    echo "ok   ${p%%:*} $((SECONDS - t0))s"
  else
    grep -Ev ' level=DEBUG ' "$work/cmd.log"
    echo "FAIL ${p%%:*}"
    exit 1
  fi
done
# The end-to-end tests that need the in-process emulator at full speed
# skip under the race detector; they run here from the race-free binary.
(cd cmd/internal/e2e && exec "$work/e2e.test" -test.run '^TestWindowGrowsUntold$' -test.timeout 5m -test.v) \
  >"$work/untold.log" 2>&1 || { grep -Ev ' level=DEBUG ' "$work/untold.log"; exit 1; }
grep -Ev ' level=DEBUG ' "$work/untold.log"
passed "$work/untold.log" TestWindowGrowsUntold

# The end-to-end reload tests again, with endpoints built with -race: a
# SIGHUP reload replaces state the packet path reads, and the unit tests
# (./tunnel/... above) see only the tunnel package. The testbed fails a
# test whose endpoint exits with the race detector's code (66) and shows
# the report.
reload_tests='TestReloadRemovalClosesPeer TestReloadRefusedChangesNothing TestSIGHUPDuringStartup'
(cd cmd/internal/e2e && exec env SCPSVPN_BINARY="$work/scpsvpn-race" "$work/e2e.test" \
   -test.run "^($(tr ' ' '|' <<<"$reload_tests"))\$" -test.timeout 10m -test.v) \
  >"$work/reload-race.log" 2>&1 || { grep -Ev ' level=DEBUG ' "$work/reload-race.log"; exit 1; }
grep -E '^(--- |ok|PASS)' "$work/reload-race.log"
# shellcheck disable=SC2086
passed "$work/reload-race.log" $reload_tests
