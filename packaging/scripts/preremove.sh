#!/bin/sh
# scpsvpn pre-remove: on removal (not upgrade), stop every instance and
# disable it, so no unit or enablement link is left behind. Runs for deb
# (remove | upgrade | ...) and rpm (0 = erase, 1 = upgrade).
set -e
case "$1" in
remove | 0) ;;
*) exit 0 ;;
esac
if [ -d /run/systemd/system ]; then
	systemctl stop 'scpsvpn@*.service' || true
fi
for link in /etc/systemd/system/*.wants/scpsvpn@*.service; do
	[ -L "$link" ] && rm -f "$link"
done
exit 0
