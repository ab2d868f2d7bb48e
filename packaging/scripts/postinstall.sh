#!/bin/sh
# scpsvpn post-install: the service user, /etc/scpsvpn readable by it, a
# private key on first install, and systemd told about the unit. Runs for
# deb (configure [old-version]) and rpm (1 = install, 2 = upgrade).
#
# Root works in /etc/scpsvpn on every install and upgrade, so the
# directory is root's (group scpsvpn, mode 0750): the service reads its
# configs and key there but can create, rename or delete nothing in it, so
# nothing running as scpsvpn can plant a link for root to follow. Entries
# are looked at only after that (they can no longer change under us), a
# link is never followed, and a new file is made with O_EXCL.
set -e

if ! getent passwd scpsvpn >/dev/null 2>&1; then
	if command -v systemd-sysusers >/dev/null 2>&1; then
		systemd-sysusers scpsvpn.conf
	else
		useradd --system --user-group --no-create-home --home-dir / \
			--shell /usr/sbin/nologin --comment "scpsvpn endpoint" scpsvpn
	fi
fi

dir=/etc/scpsvpn
chown root:scpsvpn "$dir"
chmod 0750 "$dir"

# plain FILE: a regular file, not a link, with no other name (a hard link
# made while the directory was scpsvpn's could name a file elsewhere).
plain() { [ -f "$1" ] && [ ! -L "$1" ] && [ "$(stat -c %h "$1")" = 1 ]; }

# The example config: root's, readable by the service (as configs made
# with `install -o root -g scpsvpn -m 640` are).
example=$dir/example.toml
if plain "$example"; then
	chown -h root:scpsvpn "$example"
	chmod 0640 "$example"
elif [ -e "$example" ] || [ -L "$example" ]; then
	echo "scpsvpn: $example is not a plain file; left as it is" >&2
fi

# A key on first install; an existing key (or a link an admin put there)
# is never touched. The endpoint reads it as scpsvpn and insists that it
# own it and nobody else may read it, so it is scpsvpn's, mode 0600:
# written to a fresh file (mktemp: O_EXCL, mode 0600) and renamed into
# place, which replaces a name and never follows one.
key=$dir/private.key
if [ ! -e "$key" ] && [ ! -L "$key" ]; then
	new=$(mktemp "$dir/.private.key.XXXXXX")
	if ! /usr/bin/scpsvpn genkey >"$new"; then
		rm -f "$new"
		exit 1
	fi
	chown -h scpsvpn:scpsvpn "$new"
	mv -f -T "$new" "$key"
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
