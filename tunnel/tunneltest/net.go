package tunneltest

import (
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
)

// Net records the network configuration the endpoint asks for: a
// tunnel.NetConfig that touches no kernel.
type Net struct {
	// FailUp, when set before the endpoint runs, is what Up returns.
	FailUp error

	failRoutes atomic.Pointer[error]

	mu     sync.Mutex
	addrs  []netip.Prefix
	routes []netip.Prefix
	isUp   bool
	downs  int
}

// Up records the addresses and that the device is up.
func (n *Net) Up(addrs []netip.Prefix) error {
	if n.FailUp != nil {
		return n.FailUp
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.addrs, n.isUp = slices.Clone(addrs), true
	return nil
}

// SetRoutes records the routes, or returns the error FailRoutes set.
func (n *Net) SetRoutes(subnets []netip.Prefix) error {
	if err := n.failRoutes.Load(); err != nil {
		return *err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.routes = slices.Clone(subnets)
	return nil
}

// Down removes the routes and counts the call.
func (n *Net) Down() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.routes = nil
	n.downs++
}

// FailRoutes makes SetRoutes return err from now on (nil: succeed again);
// it is safe to call while the endpoint runs.
func (n *Net) FailRoutes(err error) {
	if err == nil {
		n.failRoutes.Store(nil)
		return
	}
	n.failRoutes.Store(&err)
}

// Routes returns the routes into the TUN, sorted.
func (n *Net) Routes() []netip.Prefix {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := slices.Clone(n.routes)
	slices.SortFunc(out, netip.Prefix.Compare)
	return out
}

// Addrs returns the addresses Up assigned, and whether it was called.
func (n *Net) Addrs() ([]netip.Prefix, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.addrs), n.isUp
}

// Downs counts the calls of Down.
func (n *Net) Downs() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.downs
}
