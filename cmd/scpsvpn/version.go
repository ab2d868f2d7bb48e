package main

// The version `scpsvpn --version` prints. Release builds stamp it from git
// (packaging/build.sh: -ldflags "-X main.version=..."); a plain `go build`
// falls back to the commit the Go toolchain records in the binary, so a
// bug report always says what code ran.

import "runtime/debug"

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

// versionString returns the stamped version, else "dev" with the VCS
// revision (and "-dirty" for uncommitted changes) when the build knows it.
func versionString() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	return devVersion(info.Settings)
}

func devVersion(settings []debug.BuildSetting) string {
	rev, dirty := "", false
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "dev-" + rev
}
