// Package tunneltest holds in-memory doubles of the endpoint's
// operating-system parts (tunnel.TUN, tunnel.PacketConn and
// tunnel.NetConfig): a TUN device whose far side is a function, a UDP
// "wire" joining any number of sockets by address, and a network
// configuration that only records. Given in tunnel.Options, they run whole
// endpoints inside one test process, without root, as wireguard-go's
// tun/tuntest does for its devices.
//
// It imports nothing of tunnel (the interfaces hold only standard types),
// so tunnel's own tests use it too.
package tunneltest

// isDone reports whether ch is closed.
func isDone(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
