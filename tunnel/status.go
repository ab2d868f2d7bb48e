package tunnel

// Status: a snapshot of the endpoint (peers, associations, counters), which
// the control socket (control.go) serves to `scpsvpn status` and the
// metrics collector (metrics.go) turns into Prometheus metrics.

import (
	"fmt"
	"os"
	"time"

	"scpsvpn/peers"
	"scpsvpn/scps"
)

// Status is what `scpsvpn status` prints.
type Status struct {
	Interface string `json:"interface"`
	Listen    string `json:"listen"`
	PublicKey string `json:"public_key"`
	Instance  string `json:"instance"`
	Netns     string `json:"netns,omitempty"` // the network namespace it runs in, as /proc/self/ns/net names it
	// Control is where status reaches the endpoint: its abstract socket
	// name is not bound when another process took it first.
	Control  ControlStatus `json:"control"`
	Uptime   string        `json:"uptime"`
	Counters Counters      `json:"counters"`
	Security peers.Stats   `json:"security"`
	Peers    []PeerStatus  `json:"peers"`
}

// Counters is the endpoint's Stats as plain numbers.
type Counters struct {
	TunPackets         uint64 `json:"tun_packets"`
	TunNoPeer          uint64 `json:"tun_no_peer"`
	TunMalformed       uint64 `json:"tun_malformed"`
	TunBadChecksum     uint64 `json:"tun_bad_checksum"`
	DatagramsIn        uint64 `json:"datagrams_in"`
	DatagramsBadSrc    uint64 `json:"datagrams_bad_src"`
	StreamsBadSrc      uint64 `json:"streams_bad_src"`
	TunBadSrc          uint64 `json:"tun_bad_src"`
	UDPIn              uint64 `json:"udp_in"`
	UDPDropped         uint64 `json:"udp_dropped"`
	RepliesDropped     uint64 `json:"replies_dropped"`
	RxQueueDrops       uint64 `json:"rx_queue_drops"`
	UDPStale           uint64 `json:"udp_stale"`
	TunNoAssoc         uint64 `json:"tun_no_association"`
	FlowsOpened        uint64 `json:"flows_opened"`
	FlowsAccepted      uint64 `json:"flows_accepted"`
	FlowsRefused       uint64 `json:"flows_refused"`
	FlowsActive        int64  `json:"flows_active"`
	FlowsOverQuota     uint64 `json:"flows_over_quota"`
	DatagramsOverQuota uint64 `json:"datagrams_over_quota"`
	// The stack's SYN handling (stack.Stats): SYNs gVisor dropped with
	// every handshake slot taken, and handshakes evicted for newer SYNs.
	SYNDropped uint64 `json:"syn_dropped"`
	SYNEvicted uint64 `json:"syn_evicted"`
	// SYN cookies (stack/syncookie.go), used while the guard is full: SYNs
	// answered by a cookie, connections a valid cookie opened, ACKs whose
	// cookie was wrong or expired, cookie replies or held packets dropped.
	SYNCookiesSent     uint64 `json:"syn_cookies_sent"`
	SYNCookiesAccepted uint64 `json:"syn_cookies_accepted"`
	SYNCookiesRejected uint64 `json:"syn_cookies_rejected"`
	SYNCookieDrops     uint64 `json:"syn_cookie_drops"`
	// The quic policy: datagrams refused with ICMP port unreachable
	// (fallback); under repair, rebuilt from parities, lost but resent
	// while the flow was held (the loss became delay), given up (past
	// the resend's deadline, or the sender's queue full), resent on the
	// peer's request, marked CE rather than dropped by the sender's
	// queue, the parity datagrams sent (repair's overhead), those held
	// behind an earlier gap, and those the paced release wrote.
	QuicRefused  uint64 `json:"quic_refused"`
	QuicRepaired uint64 `json:"quic_repaired"`
	QuicHeld     uint64 `json:"quic_held"`
	QuicGivenUp  uint64 `json:"quic_given_up"`
	QuicResent   uint64 `json:"quic_resent"`
	QuicMarked   uint64 `json:"quic_marked"`
	QuicParities uint64 `json:"quic_parities"`
	QuicWaited   uint64 `json:"quic_waited"`
	QuicPaced    uint64 `json:"quic_paced"`
}

// PeerStatus is one peer and its association.
type PeerStatus struct {
	Name          string     `json:"name"`
	Endpoint      string     `json:"endpoint,omitempty"`
	Up            bool       `json:"up"`
	LastHandshake time.Time  `json:"last_handshake,omitzero"`
	Handshakes    uint64     `json:"handshakes"`
	Subnets       []string   `json:"subnets"`
	Association   scps.Stats `json:"association"`
	// Paths are the association's links to the peer when it runs several
	// (docs/multipath.md); none for a peer of one path.
	Paths []PathStatus `json:"paths,omitempty"`
}

// Status takes a snapshot.
func (e *Endpoint) Status() Status {
	s := &e.stats
	pub := e.dev.PublicKey()
	e.mu.Lock()
	cfg := e.cfg // Reload replaces it, never changes it
	as := make([]*assoc, 0, len(e.assocs))
	for _, a := range cfg.Peers {
		if x := e.assocs[a.Name]; x != nil {
			as = append(as, x)
		}
	}
	e.mu.Unlock()
	sst := e.stk.Stats()
	st := Status{
		Interface: cfg.Name,
		Listen:    e.sock.LocalAddr().String(),
		PublicKey: pub.String(),
		Instance:  fmt.Sprintf("%016x", e.instance),
		Netns:     netnsName(),
		Uptime:    time.Since(e.started).Round(time.Second).String(),
		Counters: Counters{
			TunPackets: s.TunPackets.Load(), TunNoPeer: s.TunNoPeer.Load(), TunMalformed: s.TunMalformed.Load(),
			TunBadChecksum: s.TunBadChecksum.Load(),
			DatagramsIn:    s.DatagramsIn.Load(), DatagramsBadSrc: s.DatagramsBadSrc.Load(),
			StreamsBadSrc: s.StreamsBadSrc.Load(), TunBadSrc: s.TunBadSrc.Load(),
			UDPIn: s.UDPIn.Load(), UDPDropped: s.UDPDropped.Load(), RepliesDropped: s.RepliesDropped.Load(), RxQueueDrops: s.RxQueueDrops.Load(),
			UDPStale: s.UDPStale.Load(), TunNoAssoc: s.TunNoAssoc.Load(),
			FlowsOpened: s.FlowsOpened.Load(), FlowsAccepted: s.FlowsAccepted.Load(),
			FlowsRefused: s.FlowsRefused.Load(), FlowsActive: s.FlowsActive.Load(),
			SYNDropped: sst.InFlightDrops, SYNEvicted: sst.SYNEvicted,
			SYNCookiesSent: sst.CookiesSent, SYNCookiesAccepted: sst.CookiesAccepted,
			SYNCookiesRejected: sst.CookiesRejected, SYNCookieDrops: sst.CookieDrops,
			FlowsOverQuota: s.FlowsOverQuota.Load(), DatagramsOverQuota: s.DatagramsOverQuota.Load(),
			QuicRefused: s.QuicRefused.Load(), QuicRepaired: s.QuicRepaired.Load(), QuicGivenUp: s.QuicGivenUp.Load(),
			QuicHeld: s.QuicHeld.Load(), QuicResent: s.QuicResent.Load(), QuicMarked: s.QuicMarked.Load(),
			QuicParities: s.QuicParities.Load(), QuicWaited: s.QuicWaited.Load(), QuicPaced: s.QuicPaced.Load(),
		},
		Security: e.dev.Stats(),
	}
	if c := e.control.Load(); c != nil {
		st.Control = c.state()
	}
	for _, a := range as {
		ps := PeerStatus{Name: a.cfg.Name, Association: a.stats(), Paths: a.pathStatus()}
		ps.Up = a.up.Load()
		if p, ok := e.dev.Peer(a.cfg.Name); ok {
			if ep := p.Endpoint(); ep.IsValid() {
				ps.Endpoint = ep.String()
			}
			ps.LastHandshake = p.LastHandshake()
			ps.Handshakes = p.Handshakes()
		}
		for _, sn := range a.cfg.Subnets {
			ps.Subnets = append(ps.Subnets, sn.String())
		}
		st.Peers = append(st.Peers, ps)
	}
	return st
}

// netnsName names the caller's network namespace ("net:[4026531840]").
func netnsName() string {
	n, _ := os.Readlink("/proc/self/ns/net")
	return n
}
