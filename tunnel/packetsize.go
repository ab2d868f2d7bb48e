package tunnel

// How big the association's packets are. A full packet is one UDP
// datagram that fills the underlay path's MTU ([peer.link] mtu, 1500 by
// default) after the underlay's IP and UDP headers: 1472 bytes of UDP
// payload over IPv4, 1452 over IPv6. Every byte of a full packet the path
// does not carry whole would cost a fragment (twice the loss exposure, and
// a black hole where ICMP is filtered); every byte left unused is overhead.

import (
	"net/netip"

	"scpsvpn/configs"
)

const (
	udpHeader  = 8
	ipv4Header = 20
	ipv6Header = 40
)

// underlayHeaders is what IP and UDP add to a datagram to or from addr.
// An IPv4-mapped address travels as IPv4.
func underlayHeaders(addr netip.Addr) int {
	if addr.Is6() && !addr.Is4In6() {
		return ipv6Header + udpHeader
	}
	return ipv4Header + udpHeader
}

// maxDatagram is the largest UDP payload whose packet fits a path of mtu
// bytes to or from addr.
func maxDatagram(mtu int, addr netip.Addr) int {
	return mtu - underlayHeaders(addr)
}

// underlayGuess is the address whose family sizes a peer's packets before
// its endpoint is known: the configured endpoint, else our own listen
// address, else (a wildcard listen takes either family) IPv6, whose larger
// header makes the smaller packet.
func underlayGuess(pc configs.PeerConfig, listen netip.AddrPort) netip.Addr {
	switch {
	case pc.Endpoint.IsValid():
		return pc.Endpoint.Addr()
	case listen.Addr().IsValid() && !listen.Addr().IsUnspecified():
		return listen.Addr()
	}
	return netip.IPv6Unspecified()
}
