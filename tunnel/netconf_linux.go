package tunnel

// Kernel-side configuration of the TUN device: addresses, link up, and a
// route for every peer subnet. Everything added here is recorded so that it
// can be removed again on exit or when a peer is dropped on reload.

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// netConf configures one TUN device through netlink: the real NetConfig.
type netConf struct {
	link   netlink.Link
	routes map[netip.Prefix]bool
}

func newNetConf(name string) (*netConf, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("find TUN %s: %w", name, err)
	}
	return &netConf{link: l, routes: map[netip.Prefix]bool{}}, nil
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// tunQueueLen is the TUN device's transmit queue (txqueuelen), in packets:
// the packets the LAN's senders have sent toward the endpoint that it has
// not read yet. The kernel's default of 500 overflowed with 1,000 servers
// filling their connections' windows at once: the far endpoint lost half
// of what they sent (SYN-ACKs of its dials among them, each a second's
// retransmission timeout), and the servers sent it again. What the queue
// holds is bounded by what the netstack's windows let those senders have
// in flight anyway; dropping it only makes them resend.
const tunQueueLen = 4096

// Up assigns the addresses, lengthens the transmit queue and brings the
// link up. IPv6 addresses skip duplicate address detection: the TUN is
// point-to-point and DAD would only delay the address by a second or two.
func (n *netConf) Up(addrs []netip.Prefix) error {
	for _, a := range addrs {
		na := &netlink.Addr{IPNet: prefixNet(a)}
		na.IP = a.Addr().AsSlice()
		if a.Addr().Is6() {
			na.Flags = unix.IFA_F_NODAD
		}
		if err := netlink.AddrReplace(n.link, na); err != nil {
			return fmt.Errorf("add address %s to %s: %w", a, n.link.Attrs().Name, err)
		}
	}
	if n.link.Attrs().TxQLen < tunQueueLen {
		if err := netlink.LinkSetTxQLen(n.link, tunQueueLen); err != nil {
			return fmt.Errorf("set the transmit queue of %s to %d packets: %w", n.link.Attrs().Name, tunQueueLen, err)
		}
	}
	if err := netlink.LinkSetUp(n.link); err != nil {
		return fmt.Errorf("bring %s up: %w", n.link.Attrs().Name, err)
	}
	return nil
}

// SetRoutes makes the routes into the TUN exactly the given subnets.
func (n *netConf) SetRoutes(want []netip.Prefix) error {
	keep := map[netip.Prefix]bool{}
	for _, p := range want {
		keep[p] = true
		if n.routes[p] {
			continue
		}
		r := &netlink.Route{LinkIndex: n.link.Attrs().Index, Dst: prefixNet(p)}
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("add route %s dev %s: %w", p, n.link.Attrs().Name, err)
		}
		n.routes[p] = true
	}
	for p := range n.routes {
		if !keep[p] {
			n.delRoute(p)
		}
	}
	return nil
}

func (n *netConf) delRoute(p netip.Prefix) {
	r := &netlink.Route{LinkIndex: n.link.Attrs().Index, Dst: prefixNet(p)}
	// An error means the route or the device is already gone: nothing to undo.
	_ = netlink.RouteDel(r)
	delete(n.routes, p)
}

// Down removes every route this endpoint added.
func (n *netConf) Down() {
	for p := range n.routes {
		n.delRoute(p)
	}
}
