#!/usr/bin/env bash
# Prints the version of the checked-out tree as semver, from git:
#   on a tag vX.Y.Z                 -> X.Y.Z
#   N commits after vX.Y.Z          -> X.Y.(Z+1)-dev.N+gHASH
#   no tag yet                      -> 0.0.0-dev.N+gHASH (N = commits)
# and ".dirty" in the build metadata for uncommitted changes. Packages
# built from later commits sort after earlier ones (dpkg and rpm alike).
set -euo pipefail
cd "$(dirname "$0")/.."
hash=$(git rev-parse --short=12 HEAD)
dirty=
git diff --quiet HEAD -- 2>/dev/null || dirty=.dirty
if desc=$(git describe --tags --match 'v[0-9]*.[0-9]*.[0-9]*' --long 2>/dev/null); then
	# vX.Y.Z-N-gHASH
	tag=${desc%-*-g*}
	n=${desc#"$tag"-}
	n=${n%%-*}
	base=${tag#v}
	if [ "$n" = 0 ] && [ -z "$dirty" ]; then
		echo "$base"
		exit 0
	fi
	IFS=. read -r major minor patch <<<"$base"
	echo "$major.$minor.$((patch + 1))-dev.$n+g$hash$dirty"
else
	n=$(git rev-list --count HEAD)
	echo "0.0.0-dev.$n+g$hash$dirty"
fi
