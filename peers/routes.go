// routes.go owns subnet -> peer routing: an immutable longest-prefix-match
// table built by SetPeers and swapped atomically, so Lookup takes no lock.
// It keeps one map per prefix length in use and probes the lengths from
// longest to shortest: a site has a handful of distinct lengths, so that is
// a few map lookups with no allocation.

package peers

import (
	"fmt"
	"net/netip"
	"slices"
)

type routeFamily struct {
	lengths []int // distinct prefix lengths, longest first
	byLen   map[int]map[netip.Prefix]*Peer
}

type routeTable struct {
	v4, v6 routeFamily
}

func (f *routeFamily) add(p netip.Prefix, peer *Peer) {
	if f.byLen == nil {
		f.byLen = make(map[int]map[netip.Prefix]*Peer)
	}
	m := f.byLen[p.Bits()]
	if m == nil {
		m = make(map[netip.Prefix]*Peer)
		f.byLen[p.Bits()] = m
		f.lengths = append(f.lengths, p.Bits())
	}
	m[p] = peer
}

func (f *routeFamily) lookup(a netip.Addr) (*Peer, bool) {
	for _, bits := range f.lengths {
		p, err := a.Prefix(bits)
		if err != nil {
			continue
		}
		if peer, ok := f.byLen[bits][p]; ok {
			return peer, true
		}
	}
	return nil, false
}

// normalizePrefix masks host bits and unmaps 4in6 prefixes, so equal
// subnets compare equal whatever way they were written.
func normalizePrefix(p netip.Prefix) (netip.Prefix, error) {
	if !p.IsValid() {
		return netip.Prefix{}, fmt.Errorf("invalid subnet %v", p)
	}
	a := p.Addr()
	bits := p.Bits()
	if a.Is4In6() {
		if bits < 96 {
			return netip.Prefix{}, fmt.Errorf("subnet %v: IPv4-mapped prefix shorter than /96", p)
		}
		a = a.Unmap()
		bits -= 96
	}
	return netip.PrefixFrom(a.WithZone(""), bits).Masked(), nil
}

// buildRoutes builds the table from peers whose subnets were validated
// (normalised, none claimed twice) by Device.validatePeers.
func buildRoutes(peers []*Peer) *routeTable {
	t := &routeTable{}
	for _, p := range peers {
		for _, s := range p.subnets {
			if s.Addr().Is4() {
				t.v4.add(s, p)
			} else {
				t.v6.add(s, p)
			}
		}
	}
	for _, f := range []*routeFamily{&t.v4, &t.v6} {
		slices.SortFunc(f.lengths, func(a, b int) int { return b - a })
	}
	return t
}

func (t *routeTable) lookup(a netip.Addr) (*Peer, bool) {
	a = a.Unmap()
	if a.Is4() {
		return t.v4.lookup(a)
	}
	if a.Is6() {
		return t.v6.lookup(a.WithZone(""))
	}
	return nil, false
}
