package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A bad config exits non-zero with one clear line naming the key.
func TestBadConfigOneLine(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{
		"unknown key": "[interface]\nname = \"scps0\"\nprivate_key_file = \"k\"\nmtuu = 1400\n",
		"bad rate":    "[interface]\nname = \"scps0\"\nprivate_key_file = \"k\"\n[[peer]]\nname = \"b\"\npublic_key = \"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\"\nsubnets = [\"10.2.0.0/24\"]\n[peer.link]\nup = \"fast\"\n",
		"not toml":    "[interface\n",
	}
	want := map[string]string{"unknown key": "interface.mtuu", "bad rate": "link.up", "not toml": "line 1"}
	for name, text := range cases {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".toml")
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{"up", "config check"} {
			var stderr bytes.Buffer
			args := append([]string{"scpsvpn"}, strings.Fields(cmd)...)
			code := run(append(args, "--config", p), io.Discard, &stderr)
			out := strings.TrimSpace(stderr.String())
			if code == 0 {
				t.Errorf("%s / %s: exit code 0", name, cmd)
			}
			if strings.Count(out, "\n") != 0 || !strings.Contains(out, want[name]) {
				t.Errorf("%s / %s: stderr %q, want one line naming %q", name, cmd, out, want[name])
			}
		}
	}
}

func TestConfigCheckNeedsConfig(t *testing.T) {
	var stderr bytes.Buffer
	if code := run([]string{"scpsvpn", "config", "check"}, io.Discard, &stderr); code == 0 {
		t.Error("config check without --config succeeded")
	}
}
