#!/bin/sh
# scpsvpn post-remove: systemd forgets the unit; a deb purge removes
# /etc/scpsvpn (configs and the private key) and /var/lib/scpsvpn (the
# paths the endpoints learned). The scpsvpn user stays, as
# Debian keeps system users, so files it owned are never reassigned.
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
if [ "$1" = purge ]; then
	rm -rf /etc/scpsvpn /var/lib/scpsvpn
fi
exit 0
