package tunnel

// The endpoint's operating-system parts behind three small interfaces: the
// TUN device, the association's UDP socket and the kernel's network
// configuration of the TUN. Run opens the real ones (the _linux.go files);
// tests and embedders pass their own in Options, so everything between the
// TUN and the socket (stack, flows, associations, relay, reload) runs
// without root, as wireguard-go does with its tun and conn interfaces.

import (
	"errors"
	"net/netip"
	"time"

	"scpsvpn/configs"
)

// ErrSocketBusy is PacketConn.SendNow's refusal.
var ErrSocketBusy = errors.New("socket busy: datagram dropped")

// TUN is the endpoint's view of the TUN device: the subset of wireguard's
// tun.Device it uses. Packets move in batches, each with offset bytes of
// headroom before it (wireguard's virtio-net header needs 10).
type TUN interface {
	// Read waits for packets and places up to len(bufs) of them at
	// bufs[i][offset:], their lengths in sizes. After Close it returns an
	// error wrapping os.ErrClosed.
	Read(bufs [][]byte, sizes []int, offset int) (n int, err error)
	// Write writes each bufs[i][offset:] as one packet. It may use the
	// headroom and must not keep bufs.
	Write(bufs [][]byte, offset int) (int, error)
	// BatchSize is the most packets one Read returns.
	BatchSize() int
	Close() error
}

// PacketConn is the association socket: sealed datagrams to and from peers.
type PacketConn interface {
	// Receive waits for a batch of datagrams and calls f for each, with its
	// source, then returns. One goroutine calls it; f must not keep pkt.
	// After Close it returns an error wrapping net.ErrClosed.
	Receive(f func(src netip.AddrPort, pkt []byte)) error
	// Send sends datagrams to one destination. It is safe for concurrent
	// use and does not keep pkts.
	Send(pkts [][]byte, to netip.AddrPort) error
	// SendNow sends one datagram (a handshake answer) only if that cannot
	// make Send wait: when the socket cannot take it at once, or datagrams
	// sent this way could crowd Send out of the socket's buffer, it drops
	// it and returns ErrSocketBusy. Safe for concurrent use.
	SendNow(p []byte, to netip.AddrPort) error
	// LocalAddr is the address peers send to.
	LocalAddr() netip.AddrPort
	Close() error
}

// arrivalTimer is a PacketConn that knows when the datagram being handed
// to Receive's callback reached the host (the kernel's receive
// timestamp). The association times packets from then: a loaded host
// that reads a batch late, or a goroutine that waits its turn, would
// otherwise add its hold to RTT samples, which the delay signal reads as
// a queue on the path.
type arrivalTimer interface {
	// Arrived is that time during Receive's callback; zero if unknown.
	Arrived() time.Time
}

// NetConfig is the kernel's configuration of the TUN device.
type NetConfig interface {
	// Up assigns the addresses and brings the device up.
	Up(addrs []netip.Prefix) error
	// SetRoutes makes the routes into the device exactly subnets.
	SetRoutes(subnets []netip.Prefix) error
	// Down removes every route SetRoutes added.
	Down()
}

// Options gives the endpoint operating-system parts of the caller's making.
// Run opens the real one for each nil field, from the configuration (the
// TUN and its network configuration need root or CAP_NET_ADMIN). Run owns
// what it is given: it closes the TUN and the socket when it stops.
type Options struct {
	TUN  TUN
	Conn PacketConn
	Net  NetConfig
	// PathConn, if set, opens the socket of a peer's configured path
	// ([[peer.path]]) instead of a UDP socket bound to its local address.
	PathConn func(configs.PathConfig) (PacketConn, error)
}
