#!/bin/sh
# scpsvpn pre-install: before the package's files are unpacked, take
# /etc/scpsvpn back from the scpsvpn user, who owned it in earlier packages
# (postinstall says why it must be root's). Unpacking the conffile and the
# post-install then work in a directory nothing but root can change.
# Runs for deb (install | upgrade ...) and rpm (1 = install, 2 = upgrade).
set -e
dir=/etc/scpsvpn
if [ -d "$dir" ] && getent group scpsvpn >/dev/null 2>&1; then
	chown root:scpsvpn "$dir"
	chmod 0750 "$dir"
fi
exit 0
