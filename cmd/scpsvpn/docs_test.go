package main

import (
	"bytes"
	"io"
	"runtime/debug"
	"strings"
	"testing"
)

// The man page and completions come from the command definitions: every
// visible command appears, hidden ones do not.
func TestManAndCompletionFollowCommands(t *testing.T) {
	var man, fish, bash bytes.Buffer
	for _, c := range []struct {
		args []string
		out  *bytes.Buffer
	}{{[]string{"scpsvpn", "man"}, &man}, {[]string{"scpsvpn", "completion", "fish"}, &fish}, {[]string{"scpsvpn", "completion", "bash"}, &bash}} {
		var stderr bytes.Buffer
		if code := run(c.args, c.out, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, stderr.String())
		}
	}
	if !strings.Contains(man.String(), ".TH scpsvpn 8") {
		t.Errorf("man page has no section 8 title:\n%.300s", man.String())
	}
	for _, cmd := range []string{"up", "status", "genkey", "linkemu"} {
		if !strings.Contains(man.String(), ".SH "+cmd+"\n") {
			t.Errorf("man page lacks command %s", cmd)
		}
		if !strings.Contains(fish.String(), cmd) {
			t.Errorf("fish completion lacks command %s", cmd)
		}
	}
	if strings.Contains(man.String(), ".SH man\n") {
		t.Error("the hidden man command is in the man page")
	}
	if !strings.Contains(bash.String(), "complete ") || !strings.Contains(bash.String(), "--generate-bash-completion") {
		t.Errorf("bash completion:\n%s", bash.String())
	}
	if code := run([]string{"scpsvpn", "completion", "tcsh"}, io.Discard, io.Discard); code == 0 {
		t.Error("completion for an unknown shell succeeded")
	}
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	old := version
	version = "1.2.3"
	defer func() { version = old }()
	if code := run([]string{"scpsvpn", "--version"}, &out, io.Discard); code != 0 || strings.TrimSpace(out.String()) != "scpsvpn version 1.2.3" {
		t.Errorf("--version: %d %q", code, out.String())
	}
	cases := []struct {
		settings []debug.BuildSetting
		want     string
	}{
		{nil, "dev"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}}, "dev-0123456789ab"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}}, "dev-abc-dirty"},
	}
	for _, c := range cases {
		if got := devVersion(c.settings); got != c.want {
			t.Errorf("devVersion(%v) = %q, want %q", c.settings, got, c.want)
		}
	}
}
