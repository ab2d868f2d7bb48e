package main

// sd_notify(3) without a dependency: under systemd's Type=notify the
// service manager names a datagram socket in $NOTIFY_SOCKET, and the
// endpoint writes READY=1 once it carries traffic, RELOADING=1 / READY=1
// around a SIGHUP reload, and STOPPING=1 on the way down. Outside systemd
// the variable is unset and nothing is sent.

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// sdNotify sends state (newline-separated KEY=VALUE lines) to systemd.
func sdNotify(state string) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil
	}
	if addr[0] != '/' && addr[0] != '@' {
		return fmt.Errorf("sd_notify: NOTIFY_SOCKET %q is not a unix socket", addr)
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}

// reloadingState is RELOADING=1 with the CLOCK_MONOTONIC time systemd's
// Type=notify-reload asks for.
func reloadingState() string {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d", ts.Nano()/1000)
}
