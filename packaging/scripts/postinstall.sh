#!/bin/sh
# scpsvpn post-install: the service user, /etc/scpsvpn owned by it, a
# private key on first install, and systemd told about the unit. Runs for
# deb (configure [old-version]) and rpm (1 = install, 2 = upgrade).
set -e

if ! getent passwd scpsvpn >/dev/null 2>&1; then
	if command -v systemd-sysusers >/dev/null 2>&1; then
		systemd-sysusers scpsvpn.conf
	else
		useradd --system --user-group --no-create-home --home-dir / \
			--shell /usr/sbin/nologin --comment "scpsvpn endpoint" scpsvpn
	fi
fi

# The service reads its configs and key as scpsvpn (it has no other
# privilege to read root's files); nobody else may.
chown scpsvpn:scpsvpn /etc/scpsvpn
chmod 0700 /etc/scpsvpn
if [ -f /etc/scpsvpn/example.toml ]; then
	chown scpsvpn:scpsvpn /etc/scpsvpn/example.toml
	chmod 0600 /etc/scpsvpn/example.toml
fi

# A key on first install; an existing key is never touched.
key=/etc/scpsvpn/private.key
if [ ! -e "$key" ]; then
	(umask 077 && /usr/bin/scpsvpn genkey >"$key.new")
	chown scpsvpn:scpsvpn "$key.new"
	mv "$key.new" "$key"
fi

upgrade=
case "$1" in
configure) [ -n "$2" ] && upgrade=1 ;;
2) upgrade=1 ;;
esac
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	# Running instances move to the new binary (their flows restart).
	if [ -n "$upgrade" ]; then
		systemctl try-restart 'scpsvpn@*.service' || true
	fi
fi
exit 0
