#!/usr/bin/env bash
# Builds the scpsvpn packages: .deb and .rpm for amd64 and arm64 in dist/
# (ARCHES=amd64 builds only amd64's, as packaging/test.sh does for CI).
# The version comes from git (packaging/version.sh) unless VERSION is set,
# and is stamped into the binary (`scpsvpn --version`). nfpm is a Go tool
# pinned in go.mod: nothing to install beyond Go.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

VERSION="${VERSION:-$(packaging/version.sh)}"
ARCHES="${ARCHES:-amd64 arm64}"
export VERSION
rm -rf dist
mkdir -p dist

ldflags="-s -w -X main.version=$VERSION"
for arch in $ARCHES; do
	build="dist/build/$arch"
	mkdir -p "$build"
	CGO_ENABLED=0 GOOS=linux GOARCH="$arch" go build -trimpath -ldflags "$ldflags" -o "$build/scpsvpn" ./cmd/scpsvpn
done

# Man page and completions come from the command definitions; a host
# build writes them once for every architecture.
docs=dist/build/docs
mkdir -p "$docs"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$docs/scpsvpn" ./cmd/scpsvpn
"$docs/scpsvpn" man | gzip -9n >"$docs/scpsvpn.8.gz"
"$docs/scpsvpn" completion bash >"$docs/scpsvpn.bash"
"$docs/scpsvpn" completion fish >"$docs/scpsvpn.fish"

for arch in $ARCHES; do
	pkg=dist/build/pkg
	rm -rf "$pkg"
	mkdir -p "$pkg"
	cp "dist/build/$arch/scpsvpn" "$docs"/scpsvpn.8.gz "$docs"/scpsvpn.bash "$docs"/scpsvpn.fish "$pkg/"
	for fmt in deb rpm; do
		PKG_ARCH="$arch" go tool nfpm package --config packaging/nfpm.yaml --packager "$fmt" --target dist/ >/dev/null
	done
done
rm -rf dist/build
echo "scpsvpn $VERSION:"
ls -1 dist/
