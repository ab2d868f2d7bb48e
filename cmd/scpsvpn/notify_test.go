package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSDNotify(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if err := sdNotify("READY=1"); err != nil {
		t.Errorf("without NOTIFY_SOCKET: %v", err)
	}
	for _, name := range []string{filepath.Join(t.TempDir(), "notify"), "@scpsvpn-test-notify-" + t.Name()} {
		ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		t.Setenv("NOTIFY_SOCKET", name)
		for _, state := range []string{"READY=1", reloadingState(), "STOPPING=1"} {
			if err := sdNotify(state); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			buf := make([]byte, 256)
			ln.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, err := ln.Read(buf)
			if err != nil || string(buf[:n]) != state {
				t.Errorf("%s: got %q, %v; want %q", name, buf[:n], err, state)
			}
		}
	}
	if s := reloadingState(); !strings.HasPrefix(s, "RELOADING=1\nMONOTONIC_USEC=") || strings.HasSuffix(s, "=0") {
		t.Errorf("reloadingState() = %q", s)
	}
	t.Setenv("NOTIFY_SOCKET", "vsock:2:1")
	if err := sdNotify("READY=1"); err == nil {
		t.Error("a non-unix NOTIFY_SOCKET was accepted")
	}
}
