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
# from the first phase's load, as before). Last, the command's tests in
# two streams side by side, one test at a time in each: the end-to-end
# tests that measure rates and latencies against figures taken in the
# same run, or load both cores, in one; in the other, what checks
# behaviour only and loads the machine lightly, so that it moves neither
# figure of a comparison by much.
set -euo pipefail
# Every background job gets a process group of its own, so that cleanup
# ends it with everything it started.
set -m
cd "$(dirname "$0")"
export PATH="/usr/local/go/bin:$PATH"

# phase_done WHAT: how long the phase that just ended took (CI's log).
phase_t0=$SECONDS
phase_done() { echo "test.sh: $1 took $((SECONDS - phase_t0)) s"; phase_t0=$SECONDS; }

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
phase_done "phase 1 (unit tests, virtual time, builds)"

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
phase_done "phase 2 (soak, fuzz)"

# --- Phase 3: the command's packages, in two streams side by side.

# The emulator, test bed, demo and bench, and the end-to-end tests
# (namespaces, TUN, the real binary; root only), under the race detector
# (the endpoint binaries they start are built without it: its cost in
# memory and CPU would change what the tests measure). TestSoak ran above.
#
# Two streams, each one test at a time. The timed stream holds the
# end-to-end tests that compare a rate or a latency with the same figure
# taken earlier in the run (a flood against none, a download beside
# stalled ones against one alone, QUIC under two policies), and those
# that load both cores (bulk over a veth): the tests that must not have
# a heavy job beside them. The light stream holds what checks behaviour
# and bounds only by physics or generous hang guards, and loads the
# machine lightly (a few Mbit/s over emulated links, mostly waiting out
# round trips): every other package of cmd/ (bench and demo smoke runs,
# emulator, test bed) and the end-to-end tests listed in e2e_light. An
# end-to-end test not listed there runs in the timed stream.
e2e_light='TestRestartResumesFromStateDir TestControlSocketTakenByAnotherUser
  TestSourceCheckLongestPrefix TestLANBadTCPChecksum TestLossyLinkIntegrity
  TestMultipathFailover TestMultipathBackup TestQuicFallback
  TestReloadRefusedChangesNothing TestSIGHUPDuringStartup TestUnreachablePeerRefused
  TestHubAndSpokes TestReloadRemovesSpoke TestReplayChangesNothing
  TestGarbageGetsNoReply TestSpokeCannotSpoofOthers TestHubRefusesLoop
  TestControlSocketPerNamespace TestControlSocketTakenKeepsDataPath
  TestLeastPrivilege TestMetricsAroundTransfer TestRefusedPort TestHalfClose
  TestPingAndUDP TestStopCleansUpAndResets TestMemoryBounded TestPeerRestart
  TestNoPeerUnreachable'
e2e_light=$(echo $e2e_light) # one line, one space between names
e2epkg=scpsvpn/cmd/internal/e2e
# cmdtest NAME DIR TESTBINARY ARGS...: runs a test binary in DIR, its
# output in $work/cmd-NAME.log; prints one line and, for a -test.v run,
# each test's time, or on failure the output (less DEBUG lines).
cmdtest() {
  local name=$1 dir=$2 t0=$SECONDS log; shift 2
  log=$(cmdlog "$name")
  if (cd "$dir" && exec env -u SCPSVPN_SOAK "$@" -test.paniconexit0) >"$log" 2>&1; then
    echo "ok   $name $((SECONDS - t0))s"
    grep -E '^--- (PASS|SKIP)' "$log" || true
  else
    grep -Ev ' level=DEBUG ' "$log"
    echo "FAIL $name $((SECONDS - t0))s"
    return 1
  fi
}
cmdlog() { local n=${1//[^A-Za-z0-9.-]/_}; echo "$work/cmd-$n.log"; } # cmdlog NAME: cmdtest's log
e2edir=$(go list -f '{{.Dir}}' ./cmd/internal/e2e)
timed() {
  cmdtest "$e2epkg (timed)" "$e2edir" "$work/race/e2e.test" -test.timeout 20m -test.v \
    -test.skip "^($(tr ' ' '|' <<<"$e2e_light"))\$" || return 1
  # The end-to-end tests that need the in-process emulator at full speed
  # skip under the race detector; they run here from the race-free binary.
  cmdtest "$e2epkg (race-free)" "$e2edir" "$work/e2e.test" -test.run '^TestWindowGrowsUntold$' -test.timeout 5m -test.v || return 1
  passed "$(cmdlog "$e2epkg (race-free)")" TestWindowGrowsUntold
  grep -E '^ +[a-z_]+_test\.go:[0-9]+: ' "$(cmdlog "$e2epkg (race-free)")" || true # its figures
  # The end-to-end reload tests again, with endpoints built with -race: a
  # SIGHUP reload replaces state the packet path reads, and the unit tests
  # (./tunnel/... above) see only the tunnel package. The testbed fails a
  # test whose endpoint exits with the race detector's code (66) and shows
  # the report.
  local reload_tests='TestReloadRemovalClosesPeer TestReloadRefusedChangesNothing TestSIGHUPDuringStartup'
  SCPSVPN_BINARY="$work/scpsvpn-race" cmdtest "$e2epkg (reload, endpoints with -race)" "$e2edir" "$work/e2e.test" \
    -test.run "^($(tr ' ' '|' <<<"$reload_tests"))\$" -test.timeout 10m -test.v || return 1
  # shellcheck disable=SC2086
  passed "$(cmdlog "$e2epkg (reload, endpoints with -race)")" $reload_tests
}
light() {
  local p
  for p in $cmdpkgs; do
    [ "${p%%:*}" != "$e2epkg" ] || continue
    cmdtest "${p%%:*}" "${p#*:}" "$work/race/$(basename "${p%%:*}").test" -test.timeout 20m || return 1
  done
  cmdtest "$e2epkg (light)" "$e2edir" "$work/race/e2e.test" -test.timeout 20m -test.v \
    -test.run "^($(tr ' ' '|' <<<"$e2e_light"))\$" || return 1
  # shellcheck disable=SC2086
  passed "$(cmdlog "$e2epkg (light)")" $e2e_light
}
start timed timed
start light light
finish
phase_done "phase 3 (the command's tests, timed and light streams)"
