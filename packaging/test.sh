#!/usr/bin/env bash
# The packaging check CI runs (docs/testing.md), as root on a Debian
# machine where systemd need not be PID 1:
#   build the amd64 .deb it installs and the .rpm beside it (ARCHES="amd64
#   arm64" builds the arm64 ones too; packaging/build.sh builds all for a
#   release); dpkg -i the .deb; check its files, user, key and unit
#   (systemd-analyze verify, and security: exposure at most 2.0); plant
#   links in /etc/scpsvpn as an older package let its user do, upgrade,
#   and check root followed none of them; run the *installed* binary as
#   user scpsvpn holding only CAP_NET_ADMIN at both ends of two network
#   namespaces (both TUNs named scps0), carry a TCP download and a ping,
#   read status and scrape the metrics; then boot systemd as PID 1 in a
#   container per site (systemd-nspawn, the host's /usr read-only, a copy
#   of its /etc, the same two network namespaces) and bring both sites up
#   with `systemctl enable --now scpsvpn@scps0`, carry traffic, reload and
#   stop them; dpkg -r (no unit or enablement left), dpkg --purge (no
#   /etc/scpsvpn).
# Everything it makes is removed on any exit. SKIP_BUILD=1 reuses dist/.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

[ "$(id -u)" = 0 ] || { echo "packaging/test.sh: needs root" >&2; exit 1; }
if dpkg -s scpsvpn >/dev/null 2>&1; then
	echo "packaging/test.sh: the scpsvpn package is installed here; remove it first (dpkg --purge scpsvpn)" >&2
	exit 1
fi

passed=0 failed=0
check() { # check DESCRIPTION COMMAND...: one line per check
	if "${@:2}"; then passed=$((passed + 1)); echo "ok   $1"; else failed=$((failed + 1)); echo "FAIL $1"; fi
}

tmp=$(mktemp -d /tmp/scpsvpn-pkgtest.XXXXXX)
chmod 755 "$tmp" # the endpoints' user reaches its runtime directories here
id=$$
nsA="scpspkg-$id-a" nsB="scpspkg-$id-b"
pids=()
had_user=0
getent passwd scpsvpn >/dev/null && had_user=1
containers=()
cleanup() {
	set +e
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	stop_containers
	for r in "$tmp"/root-*; do
		mountpoint -q "$r/usr" && umount "$r/usr"
	done
	for ns in "$nsA" "$nsB"; do
		ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
		ip netns del "$ns" 2>/dev/null
	done
	dpkg -s scpsvpn >/dev/null 2>&1 && dpkg --purge scpsvpn >/dev/null
	rm -f /etc/systemd/system/multi-user.target.wants/scpsvpn@scps0.service
	if [ "$had_user" = 0 ] && getent passwd scpsvpn >/dev/null; then
		userdel scpsvpn 2>/dev/null
		getent group scpsvpn >/dev/null && groupdel scpsvpn 2>/dev/null
	fi
	rm -rf --one-file-system "$tmp"
}
# stop_containers halts the site containers (nspawn asks the container's
# systemd to power off on SIGTERM) and kills what is left after 20 s.
stop_containers() {
	local p
	for p in "${containers[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${containers[@]}"; do
		for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	containers=()
}
trap cleanup EXIT
trap 'exit 130' INT TERM

need=()
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v setpriv >/dev/null || need+=(util-linux)
command -v systemd-nspawn >/dev/null || need+=(systemd-container)
command -v curl >/dev/null || need+=(curl)
command -v python3 >/dev/null || need+=(python3)
command -v ping >/dev/null || need+=(iputils-ping)
command -v ip >/dev/null || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# --- build -----------------------------------------------------------------
# Only what is installed below is built for it, and the .rpm beside it
# (nfpm over the same binary: a second); an arm64 binary is a second
# compile of everything, so CI only checks its packages resolve for arm64.
export ARCHES="${ARCHES:-amd64}"
if [ "${SKIP_BUILD:-}" != 1 ]; then
	start=$SECONDS
	./packaging/build.sh
	echo "built in $((SECONDS - start)) s"
fi
version=$(packaging/version.sh)
deb=$(ls dist/scpsvpn_*_amd64.deb)
# rpm_is FILE ARCHNUM: the file opens with an RPM lead naming scpsvpn and
# the architecture (1 x86_64, 19 aarch64), as rpm reads it first.
rpm_is() {
	python3 - "$1" "$2" <<-'PY'
		import struct, sys
		lead = open(sys.argv[1], "rb").read(96)
		magic, _, _, _, arch = struct.unpack(">4sBBHH", lead[:10])
		sys.exit(not (magic == b"\xed\xab\xee\xdb" and arch == int(sys.argv[2]) and lead[10:76].startswith(b"scpsvpn-")))
	PY
}
for arch in $ARCHES; do
	case $arch in amd64) rpmarch=x86_64 archnum=1 ;; arm64) rpmarch=aarch64 archnum=19 ;; esac
	check "the $arch .deb says Architecture: $arch" sh -c "dpkg-deb -f dist/scpsvpn_*_$arch.deb Architecture | grep -qx $arch"
	check "the $rpmarch .rpm is an RPM for $rpmarch" rpm_is "$(ls dist/scpsvpn-*.$rpmarch.rpm)" "$archnum"
done
case " $ARCHES " in
*" arm64 "*) ;;
*) check "scpsvpn's packages resolve for arm64 (go list)" sh -c "GOARCH=arm64 go list -deps ./cmd/scpsvpn >/dev/null" ;;
esac

# --- install ---------------------------------------------------------------
dpkg -i "$deb" >/dev/null
check "scpsvpn --version is the package's ($version)" sh -c "scpsvpn --version | grep -qF '$version'"
check "user scpsvpn exists without a login shell" sh -c "getent passwd scpsvpn | grep -q nologin"
owned() { [ "$(stat -c %U:%G:%a "$2")" = "$1" ]; } # owned USER:GROUP:MODE PATH
check "/etc/scpsvpn is root's, group scpsvpn, mode 0750" owned root:scpsvpn:750 /etc/scpsvpn
check "a private key was made, scpsvpn's, mode 0600" owned scpsvpn:scpsvpn:600 /etc/scpsvpn/private.key
check "example.toml is root's, group scpsvpn, mode 0640" owned root:scpsvpn:640 /etc/scpsvpn/example.toml
check "the example config is a conffile" grep -qx /etc/scpsvpn/example.toml /var/lib/dpkg/info/scpsvpn.conffiles
check "the man page is scpsvpn(8)" sh -c "zcat /usr/share/man/man8/scpsvpn.8.gz | grep -q '^.TH scpsvpn 8'"
check "bash completion installed" test -s /usr/share/bash-completion/completions/scpsvpn
check "systemd-analyze verify scpsvpn@scps0.service" systemd-analyze verify --man=no scpsvpn@scps0.service
exposure=$(systemd-analyze security --offline=true --no-pager scpsvpn@scps0.service 2>/dev/null |
	sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
check "systemd-analyze security: the unit's exposure ${exposure:-?} is at most 2.0" \
	awk -v e="${exposure:-99}" 'BEGIN { exit !(e <= 2.0) }'
check "systemctl enable scpsvpn@scps0 (offline)" sh -c "systemctl enable scpsvpn@scps0.service >/dev/null 2>&1 && test -L /etc/systemd/system/multi-user.target.wants/scpsvpn@scps0.service"

# --- links planted in /etc/scpsvpn, then an upgrade ------------------------
# Root works in /etc/scpsvpn on every install and upgrade. Its user cannot
# create anything there; an older package gave it the directory, so plant
# what its user could have then (example.toml a link to a root-owned file,
# private.key gone and private.key.new a link), hand the directory back as
# that package left it, and install the package over itself: the targets
# stay as they were, and a new key is made.
cannot_plant() { ! setpriv --reuid=scpsvpn --regid=scpsvpn --init-groups ln -s /etc/passwd /etc/scpsvpn/planted 2>/dev/null; }
check "user scpsvpn cannot create a link in /etc/scpsvpn" cannot_plant
for v in example key; do
	echo "root's $v" >"$tmp/victim-$v"
	chmod 600 "$tmp/victim-$v"
done
cp -p /etc/scpsvpn/example.toml "$tmp/example.toml"
oldkey=$(cat /etc/scpsvpn/private.key)
ln -sfn "$tmp/victim-example" /etc/scpsvpn/example.toml
rm /etc/scpsvpn/private.key
ln -s "$tmp/victim-key" /etc/scpsvpn/private.key.new
chown scpsvpn:scpsvpn /etc/scpsvpn && chmod 700 /etc/scpsvpn
dpkg --force-confold -i "$deb" >"$tmp/dpkg-upgrade.log" 2>&1 </dev/null || cat "$tmp/dpkg-upgrade.log"
untouched() { owned root:root:600 "$tmp/victim-$1" && [ "$(cat "$tmp/victim-$1")" = "root's $1" ]; }
check "upgrade: a link at example.toml was not followed" untouched example
check "upgrade: a link at private.key.new was not followed" untouched key
check "upgrade: /etc/scpsvpn is root's again, group scpsvpn, mode 0750" owned root:scpsvpn:750 /etc/scpsvpn
new_key() { # (site A below runs on it, read as scpsvpn)
	[ ! -L /etc/scpsvpn/private.key ] && owned scpsvpn:scpsvpn:600 /etc/scpsvpn/private.key &&
		[ "$(cat /etc/scpsvpn/private.key)" != "$oldkey" ]
}
check "upgrade: a new private key, a plain file, scpsvpn's, mode 0600" new_key
rm -f /etc/scpsvpn/example.toml /etc/scpsvpn/private.key.new /etc/scpsvpn/*.dpkg-*
cp -p "$tmp/example.toml" /etc/scpsvpn/example.toml

# --- two sites in network namespaces, as the unit runs them --------------
for ns in "$nsA" "$nsB"; do ip netns add "$ns"; ip -n "$ns" link set lo up; done
ip link add "spk$id" netns "$nsA" type veth peer name "spk$id" netns "$nsB"
ip -n "$nsA" addr add 10.201.0.1/24 dev "spk$id" && ip -n "$nsA" link set "spk$id" up
ip -n "$nsB" addr add 10.201.0.2/24 dev "spk$id" && ip -n "$nsB" link set "spk$id" up

install -o scpsvpn -g scpsvpn -m 600 /dev/null /etc/scpsvpn/site-b.key
scpsvpn genkey >/etc/scpsvpn/site-b.key
pubA=$(scpsvpn pubkey </etc/scpsvpn/private.key)
pubB=$(scpsvpn pubkey </etc/scpsvpn/site-b.key)
site() { # site NAME KEY ADDR LISTEN PEER PEERKEY PEERENDPOINT PEERSUBNET EXTRA
	install -o root -g scpsvpn -m 640 /dev/null "/etc/scpsvpn/$1.toml"
	cat >"/etc/scpsvpn/$1.toml" <<-TOML
		[interface]
		name = "scps0"
		listen = "$4"
		private_key_file = "$2"
		address = ["$3"]
		$9

		[[peer]]
		name = "$5"
		public_key = "$6"
		endpoint = "$7"
		subnets = ["$8"]

		[peer.link]
		up = "100Mbit"
		down = "100Mbit"
		rtt = "10ms"
	TOML
}
site site-a /etc/scpsvpn/private.key 10.1.0.1/24 10.201.0.1:4700 site-b "$pubB" 10.201.0.2:4700 10.2.0.0/24 'metrics = "127.0.0.1:9477"'
site site-b /etc/scpsvpn/site-b.key 10.2.0.1/24 10.201.0.2:4700 site-a "$pubA" 10.201.0.1:4700 10.1.0.0/24 ''
check "scpsvpn config check accepts both sites" sh -c "scpsvpn config check -c /etc/scpsvpn/site-a.toml >/dev/null && scpsvpn config check -c /etc/scpsvpn/site-b.toml >/dev/null"

# Distributions make /dev/net/tun mode 0666; a bare CI container may not,
# so a 0666 node is bound over it inside `ip netns exec`'s own mount
# namespace (the host's stays as it is).
mknod -m 666 "$tmp/tun" c 10 200
run_site() { # run_site NS NAME: the unit's ExecStart, user, capabilities, runtime directory
	install -d -o scpsvpn -g scpsvpn -m 700 "$tmp/run/$2"
	ip netns exec "$1" env RUNTIME_DIRECTORY="$tmp/run/$2" sh -c "mount --bind $tmp/tun /dev/net/tun && exec setpriv \
		--reuid=scpsvpn --regid=scpsvpn --init-groups \
		--inh-caps=-all,+net_admin --ambient-caps=-all,+net_admin --bounding-set=-all,+net_admin --no-new-privs \
		/usr/bin/scpsvpn up --config /etc/scpsvpn/$2.toml" >"$tmp/$2.log" 2>&1 &
	pids+=($!)
}
run_site "$nsA" site-a
run_site "$nsB" site-b
up=0
for _ in $(seq 150); do
	if grep -q "association up" "$tmp/site-a.log" && grep -q "association up" "$tmp/site-b.log"; then up=1; break; fi
	sleep 0.2
done
check "both associations up" test "$up" = 1
[ "$up" = 1 ] || { tail -20 "$tmp"/site-*.log; }
pidA=${pids[0]}
check "site A runs as scpsvpn with CAP_NET_ADMIN only" sh -c "grep -q \"^Uid:\\s*$(id -u scpsvpn)\\s\" /proc/$pidA/status && grep -q '^CapEff:\\s*0000000000001000' /proc/$pidA/status && grep -q '^CapBnd:\\s*0000000000001000' /proc/$pidA/status"

# A TCP download (site A's client from site B's server) and a ping.
head -c 20000000 /dev/urandom >"$tmp/blob"
ip netns exec "$nsB" python3 -m http.server --bind 10.2.0.1 --directory "$tmp" 8080 >"$tmp/http.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do ip netns exec "$nsB" bash -c 'exec 3<>/dev/tcp/10.2.0.1/8080' 2>/dev/null && break; sleep 0.1; done
check "TCP download of 20 MB across the tunnel, every byte equal" sh -c "ip netns exec $nsA curl -sS --max-time 60 -o $tmp/got http://10.2.0.1:8080/blob && cmp -s $tmp/blob $tmp/got"
check "ping across the tunnel" sh -c "ip netns exec $nsA ping -c 3 -i 0.2 -W 2 10.2.0.1 | grep -q ' 0% packet loss'"
check "scpsvpn status in site A's namespace shows site-b up" sh -c "ip netns exec $nsA scpsvpn status | grep -Eq '^site-b +up '"
check "scpsvpn status through the runtime directory's control.sock" sh -c "scpsvpn status --socket $tmp/run/site-a/control.sock | grep -Eq '^site-b +up '"
ip netns exec "$nsA" curl -sS --max-time 10 http://127.0.0.1:9477/metrics >"$tmp/metrics" || true
got=$(awk '$1 == "scpsvpn_peer_stream_received_bytes_total{peer=\"site-b\"}" {printf "%d", $2}' "$tmp/metrics")
check "metrics: site A received >= 20 MB of stream bytes from site-b (${got:-none})" test "${got:-0}" -ge 20000000
check "metrics: scpsvpn_peer_up{peer=\"site-b\"} 1" grep -qx 'scpsvpn_peer_up{peer="site-b"} 1' "$tmp/metrics"
check "no errors logged" sh -c "! grep -h 'level=ERROR' $tmp/site-a.log $tmp/site-b.log"

for p in "${pids[@]:0:2}"; do kill -TERM "$p"; done
codes=0
for p in "${pids[@]:0:2}"; do wait "$p" || codes=1; done
check "both endpoints stop cleanly on SIGTERM" test "$codes" = 0

# --- the same two sites as systemd services ---------------------------------
# Each site is a container whose PID 1 is systemd (systemd-nspawn): the
# host's /usr read-only (the installed package), a copy of its /etc (the
# package's user, key and /etc/scpsvpn; no host services enabled), its own
# /tmp, /run and cgroups, and the site's network namespace from above.
# There, as a newcomer would: systemctl enable --now scpsvpn@scps0.
in_site() { # in_site NS COMMAND...: run a command inside the site's container
	local leader
	leader=$(ps --ppid "${containers[$1]}" -o pid=,comm= | awk '$2 == "systemd" {print $1; exit}')
	nsenter -t "$leader" -a "${@:2}"
}
boot_site() { # boot_site INDEX NS SITE
	local r="$tmp/root-$3"
	mkdir -p "$r"/{usr,var,dev,proc,sys,run,tmp,root,srv}
	for l in bin sbin lib lib64; do ln -sfn "usr/$l" "$r/$l"; done
	mount --bind /usr "$r/usr" && mount -o remount,bind,ro "$r/usr"
	cp -a /etc "$r/etc"
	find "$r/etc/systemd/system" -mindepth 1 -maxdepth 1 -name '*.wants' -exec rm -rf {} +
	: >"$r/etc/machine-id" # a machine id of its own, made at boot
	cp -a "/etc/scpsvpn/$3.toml" "$r/etc/scpsvpn/scps0.toml"
	setsid systemd-nspawn -D "$r" --keep-unit --register=no --machine="scpspkg-$id-$1" \
		--capability=CAP_NET_ADMIN --network-namespace-path="/run/netns/$2" \
		--bind="$tmp/tun:/dev/net/tun" --console=passive --boot \
		>"$tmp/container-$3.log" 2>&1 </dev/null &
	containers[$1]=$!
}
boot_site 0 "$nsA" site-a
boot_site 1 "$nsB" site-b
booted=1
for i in 0 1; do
	for _ in $(seq 100); do
		ps --ppid "${containers[$i]}" -o comm= 2>/dev/null | grep -qx systemd && break
		sleep 0.2
	done
	# Until its manager answers on its bus, systemctl prints nothing.
	for _ in $(seq 200); do
		state=$(in_site "$i" systemctl is-system-running 2>/dev/null) || true
		case "$state" in "" | initializing | starting) sleep 0.3 ;; *) break ;; esac
	done
	# degraded: the manager is up and a unit of the container's own base
	# system failed (our unit is not enabled yet); say which, and go on.
	if [ "$state" = degraded ]; then
		echo "container $i: degraded; failed units:"
		in_site "$i" systemctl --failed --no-legend --plain 2>/dev/null | sed 's/^/  /' || true
	elif [ "$state" != running ]; then
		booted=0
		echo "container $i: ${state:-no answer}"
		tail -n 20 "$tmp"/container-*.log
	fi
done
check "systemd boots as PID 1 in both site containers" test "$booted" = 1
unit=scpsvpn@scps0.service
prop() { in_site "$1" systemctl show -p "$2" --value "$unit"; } # prop SITE PROPERTY
service_up() { # the unit is active and enabled, and its status came through sd_notify
	[ "$(in_site "$1" systemctl is-active "$unit")" = active ] &&
		[ "$(in_site "$1" systemctl is-enabled "$unit")" = enabled ] &&
		[ -n "$(prop "$1" StatusText)" ]
}
least_privilege() { # the service's process: user scpsvpn, CAP_NET_ADMIN only
	in_site 0 cat "/proc/$(prop 0 MainPID)/status" >"$tmp/main.status" &&
		grep -q "^Uid:\s*$(id -u scpsvpn)\s" "$tmp/main.status" &&
		grep -q '^CapEff:\s*0000000000001000' "$tmp/main.status" &&
		grep -q '^CapBnd:\s*0000000000001000' "$tmp/main.status"
}
download() {
	in_site 0 curl -sS --max-time 60 -o /root/got http://10.2.0.1:8080/blob &&
		cmp -s "$tmp/blob" "$tmp/root-site-a/root/got"
}
reload_keeps() { # a reload keeps the process and says so in the journal
	local before
	before=$(prop 0 MainPID)
	in_site 0 systemctl reload "$unit" &&
		[ "$(prop 0 MainPID)" = "$before" ] &&
		[ "$(in_site 0 systemctl is-active "$unit")" = active ] &&
		in_site 0 journalctl -u "$unit" --no-pager | grep -q 'reload done'
}
stops_cleanly() {
	in_site "$1" systemctl stop "$unit" &&
		[ "$(prop "$1" Result)" = success ] && [ "$(prop "$1" ExecMainStatus)" = 0 ]
}
pings() { in_site 0 ping -c 3 -i 0.2 -W 2 10.2.0.1 | grep -q ' 0% packet loss'; }
no_errors() { ! in_site "$1" journalctl -u "$unit" --no-pager | grep -q 'level=ERROR'; }

for i in 0 1; do
	check "site $i: systemctl enable --now $unit" in_site "$i" systemctl enable --now --quiet "$unit"
done
for i in 0 1; do
	check "site $i: the unit is active and enabled, READY through sd_notify" service_up "$i"
done
check "site A's service runs as scpsvpn with CAP_NET_ADMIN only" least_privilege
up=0
for _ in $(seq 150); do
	in_site 0 scpsvpn status 2>/dev/null | grep -Eq '^site-b +up ' && { up=1; break; }
	sleep 0.2
done
check "scpsvpn status in site A's container shows site-b up" test "$up" = 1
cp "$tmp/blob" "$tmp/root-site-b/srv/blob"
in_site 1 python3 -m http.server --bind 10.2.0.1 --directory /srv 8080 >"$tmp/http-sd.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do in_site 1 bash -c 'exec 3<>/dev/tcp/10.2.0.1/8080' 2>/dev/null && break; sleep 0.1; done
check "services: TCP download of 20 MB across the tunnel, every byte equal" download
check "services: ping across the tunnel" pings
check "systemctl reload $unit: same process, still active" reload_keeps
# What the endpoint learned of its peer's path outlives it, in the unit's
# state directory, in a file of the interface's own.
state_kept() {
	local f="$tmp/root-$1/var/lib/scpsvpn/scps0.paths"
	[ -f "$f" ] && [ "$(stat -c %U "$f")" = scpsvpn ] && head -n 1 "$f" | grep -q '^scpsvpn-paths '
}
for i in 0 1; do
	check "site $i: systemctl stop: the endpoint exits cleanly" stops_cleanly "$i"
	check "site $i: no errors in the unit's journal" no_errors "$i"
done
check "site A: the peer's path is kept in StateDirectory across the stop" state_kept site-a
stop_containers
for r in "$tmp"/root-*; do umount "$r/usr"; done

# --- remove and purge ------------------------------------------------------
# The state directory as the unit makes it (StateDirectory=): kept by a
# remove, gone with a purge.
install -d -o scpsvpn -g scpsvpn -m 700 /var/lib/scpsvpn
dpkg -r scpsvpn >/dev/null
check "dpkg -r: no unit left" test ! -e /usr/lib/systemd/system/scpsvpn@.service
check "dpkg -r: no enablement link left" test ! -e /etc/systemd/system/multi-user.target.wants/scpsvpn@scps0.service
check "dpkg -r: no binary left" test ! -e /usr/bin/scpsvpn
check "dpkg -r: configs and key kept" test -f /etc/scpsvpn/private.key
check "dpkg -r: state directory kept" test -d /var/lib/scpsvpn
dpkg --purge scpsvpn >/dev/null
check "dpkg --purge: /etc/scpsvpn removed" test ! -e /etc/scpsvpn
check "dpkg --purge: /var/lib/scpsvpn removed" test ! -e /var/lib/scpsvpn

echo "packaging: $passed passed, $failed failed"
[ "$failed" = 0 ]
