package tunneltest_test

import (
	"scpsvpn/tunnel"
	"scpsvpn/tunnel/tunneltest"
)

// The doubles are what tunnel.Options takes.
var (
	_ tunnel.TUN        = (*tunneltest.TUN)(nil)
	_ tunnel.PacketConn = (*tunneltest.Conn)(nil)
	_ tunnel.NetConfig  = (*tunneltest.Net)(nil)
)
