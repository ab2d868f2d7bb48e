package tunnel

// The endpoint's Prometheus metrics. A custom collector turns a Status
// snapshot, taken at scrape time, into metrics: the counters the packet
// path keeps anyway are read, nothing is counted twice. Names follow
// Prometheus conventions (base units, counters end in _total); the only
// labels are the peer's name and small fixed sets (cause, reason, origin).

import (
	"github.com/prometheus/client_golang/prometheus"
)

// NewCollector returns the collector of e's metrics. Before e is ready it
// reports nothing.
func NewCollector(e *Endpoint) prometheus.Collector {
	return newCollector(func() (Status, bool) {
		select {
		case <-e.ready:
			return e.Status(), true
		default:
			return Status{}, false
		}
	})
}

type collector struct {
	status func() (Status, bool)
}

func newCollector(status func() (Status, bool)) *collector { return &collector{status: status} }

const ns = "scpsvpn"

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(ns+"_"+name, help, labels, nil)
}

// peerMetric is one per-peer metric read from a PeerStatus.
type peerMetric struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	val  func(p *PeerStatus) float64
}

func peerGauge(name, help string, val func(p *PeerStatus) float64) peerMetric {
	return peerMetric{desc(name, help, "peer"), prometheus.GaugeValue, val}
}

func peerCounter(name, help string, val func(p *PeerStatus) float64) peerMetric {
	return peerMetric{desc(name, help, "peer"), prometheus.CounterValue, val}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var peerMetrics = []peerMetric{
	peerGauge("peer_up", "1 while the association with the peer carries traffic (handshake done, not in an outage).",
		func(p *PeerStatus) float64 { return b2f(p.Up) }),
	peerGauge("peer_last_handshake_timestamp_seconds", "Unix time of the last completed handshake with the peer; 0 if none.",
		func(p *PeerStatus) float64 {
			if p.LastHandshake.IsZero() {
				return 0
			}
			return float64(p.LastHandshake.UnixNano()) / 1e9
		}),
	peerCounter("peer_handshakes_total", "Handshakes with the peer that completed, rekeys included.",
		func(p *PeerStatus) float64 { return float64(p.Handshakes) }),
	peerGauge("peer_rtt_seconds", "Smoothed round-trip time of the association.",
		func(p *PeerStatus) float64 { return p.Association.SRTT.Seconds() }),
	peerGauge("peer_min_rtt_seconds", "Smallest round-trip time seen (the path's propagation delay).",
		func(p *PeerStatus) float64 { return p.Association.MinRTT.Seconds() }),
	peerGauge("peer_congestion_window_bytes", "Congestion window.",
		func(p *PeerStatus) float64 { return float64(p.Association.Cwnd) }),
	peerGauge("peer_in_flight_bytes", "Bytes sent and not yet acknowledged.",
		func(p *PeerStatus) float64 { return float64(p.Association.BytesInFlight) }),
	peerGauge("peer_pacing_rate_bytes_per_second", "Rate the pacer releases packets at; 0 means unpaced.",
		func(p *PeerStatus) float64 { return p.Association.PacingRate }),
	peerGauge("peer_delivery_rate_bytes_per_second", "Bytes acknowledged per second over the last round trip.",
		func(p *PeerStatus) float64 { return p.Association.DeliveryRate }),
	peerCounter("peer_sent_bytes_total", "Association packet bytes sent to the peer (without UDP/IP and AEAD overhead).",
		func(p *PeerStatus) float64 { return float64(p.Association.BytesSent) }),
	peerCounter("peer_received_bytes_total", "Association packet bytes accepted from the peer.",
		func(p *PeerStatus) float64 { return float64(p.Association.BytesReceived) }),
	peerCounter("peer_sent_packets_total", "Association packets sent to the peer.",
		func(p *PeerStatus) float64 { return float64(p.Association.PacketsSent) }),
	peerCounter("peer_received_packets_total", "Association packets accepted from the peer.",
		func(p *PeerStatus) float64 { return float64(p.Association.PacketsReceived) }),
	peerCounter("peer_stream_sent_bytes_total", "New stream (TCP payload) bytes sent to the peer, first transmissions only.",
		func(p *PeerStatus) float64 { return float64(p.Association.StreamBytesSent) }),
	peerCounter("peer_stream_received_bytes_total", "Stream (TCP payload) bytes from the peer delivered in order.",
		func(p *PeerStatus) float64 { return float64(p.Association.StreamBytesReceived) }),
	peerCounter("peer_retransmitted_bytes_total", "Stream bytes sent again after a loss or a probe.",
		func(p *PeerStatus) float64 { return float64(p.Association.RetransmitBytes) }),
	peerCounter("peer_retransmitted_frames_total", "Stream frames sent again after a loss or a probe.",
		func(p *PeerStatus) float64 { return float64(p.Association.Retransmits) }),
	peerCounter("peer_tail_copy_bytes_total", "Stream bytes sent again as tail copies: a burst's last packets, into an otherwise idle link, before any loss was known.",
		func(p *PeerStatus) float64 { return float64(p.Association.TailCopyBytes) }),
	peerCounter("peer_parity_bytes_total", "Parity bytes sent at a burst's end: the XOR of each block of 32 of its last round trip's packets, from which the peer rebuilds one loss per block.",
		func(p *PeerStatus) float64 { return float64(p.Association.ParityBytes) }),
	peerCounter("peer_parity_rebuilt_packets_total", "Packets the peer's parities rebuilt here.",
		func(p *PeerStatus) float64 { return float64(p.Association.ParityRepairs) }),
	peerCounter("peer_bad_parity_total", "The peer's parity blocks that rebuilt a malformed packet, dropped.",
		func(p *PeerStatus) float64 { return float64(p.Association.BadParity) }),
	peerCounter("peer_lost_packets_total", "Packets declared lost.",
		func(p *PeerStatus) float64 { return float64(p.Association.PacketsLost) }),
	peerCounter("peer_outages_total", "Times the association entered outage mode (the link went silent).",
		func(p *PeerStatus) float64 { return float64(p.Association.Outages) }),
	peerCounter("peer_outage_seconds_total", "Time spent in outage mode, the current outage included.",
		func(p *PeerStatus) float64 { return p.Association.OutageTime.Seconds() }),
	peerGauge("peer_in_outage", "1 while the association is in outage mode.",
		func(p *PeerStatus) float64 { return b2f(p.Association.Outage) }),
	peerGauge("peer_streams_open", "Streams (carried TCP connections) open with the peer.",
		func(p *PeerStatus) float64 { return float64(p.Association.StreamsOpen) }),
	peerCounter("peer_datagrams_sent_total", "Datagrams (non-TCP packets) sent to the peer.",
		func(p *PeerStatus) float64 { return float64(p.Association.DatagramsSent) }),
	peerCounter("peer_datagrams_received_total", "Datagrams received from the peer.",
		func(p *PeerStatus) float64 { return float64(p.Association.DatagramsReceived) }),
	peerGauge("peer_buffered_bytes", "Memory held by the peer's stream send and receive buffers.",
		func(p *PeerStatus) float64 { return float64(p.Association.BufferedBytes) }),
}

var (
	descPathUp        = desc("path_up", "1 while the path's packets are acknowledged (docs/multipath.md).", "peer", "path")
	descPathActive    = desc("path_active", "1 while the path carries the association's data.", "peer", "path")
	descPathRTT       = desc("path_rtt_seconds", "Smoothed round-trip time of packets sent on the path.", "peer", "path")
	descPathLoss      = desc("path_loss_ratio", "Share of the packets awaited on the path whose acknowledgement never came while a later one's did.", "peer", "path")
	descPathSent      = desc("path_sent_bytes_total", "Association packet bytes sent on the path.", "peer", "path")
	descPathDataSent  = desc("path_data_sent_bytes_total", "Bytes of packets sent on the path that carried stream data or datagrams.", "peer", "path")
	descPathReceived  = desc("path_received_bytes_total", "Association packet bytes accepted from the path.", "peer", "path")
	descPathProbes    = desc("path_probes_total", "Path probes sent on the path.", "peer", "path")
	descPathDowns     = desc("path_downs_total", "Times the path went down.", "peer", "path")
	descLossEvents    = desc("peer_loss_events_total", "Loss events by the cause they were attributed to; only congestion shrinks the window.", "peer", "cause")
	descStreamsOpened = desc("peer_streams_opened_total", "Streams opened, by us (local) or by the peer.", "peer", "by")
	descPeerDrops     = desc("peer_drops_total", "Association packets or datagrams dropped, by reason.", "peer", "reason")

	descInfo           = desc("endpoint_info", "Always 1; labels describe the endpoint.", "interface", "listen", "public_key")
	descFlowsActive    = desc("flows_active", "TCP connections carried now.")
	descFlows          = desc("flows_total", "TCP connections carried, by where they started: local (a LAN client here) or peer (re-originated here).", "origin")
	descFlowsRefused   = desc("flows_refused_total", "TCP connections refused (no peer, limit reached, far side could not connect).")
	descBuffered       = desc("buffered_bytes", "Memory held by every association's stream buffers.")
	descTunPackets     = desc("tun_packets_total", "Packets read from the TUN device (a TCP segment the kernel sent as one, up to 64 KB, counts once).")
	descTunDrops       = desc("tun_drops_total", "Packets from the TUN, or peers' datagrams for it, dropped, by reason.", "reason")
	descStreamsBadSrc  = desc("streams_bad_source_total", "Streams a peer opened for a source outside its subnets, refused.")
	descUDPPackets     = desc("udp_received_packets_total", "Datagrams received on the association socket.")
	descUDPDrops       = desc("udp_drops_total", "Datagrams on the association socket dropped before reaching an association, by reason.", "reason")
	descInitiations    = desc("handshake_initiations_sent_total", "Handshake initiations sent, retransmissions included.")
	descHandshakeTimeo = desc("handshake_timeouts_total", "Handshake attempts given up unanswered.")
	descCookiesSent    = desc("handshake_cookie_replies_sent_total", "Initiations answered with a cookie instead of a handshake (we were under load).")
	descCookiesRcvd    = desc("handshake_cookies_received_total", "Cookies a loaded peer sent us.")
	descSYNDropped     = desc("syn_dropped_total", "LAN clients' SYNs the netstack dropped with every handshake slot taken (a SYN flood).")
	descSYNEvicted     = desc("syn_evicted_total", "Local handshakes in progress ended by the SYN guard to make room for newer SYNs.")
	descCookies        = desc("syn_cookies_total", "SYN cookies while the handshake guard was full (a SYN flood), by outcome: sent (a SYN answered), accepted (an ACK with a valid cookie opened a connection), rejected (wrong or expired), dropped (queue full).", "outcome")
	descFlowsOverQuota = desc("flows_over_quota_total", "Streams a peer opened past its share of max_flows, refused.")
	descControlBound   = desc("control_socket_bound", "1 while the endpoint holds its abstract control socket name, where scpsvpn status finds it; 0 when another process took the name first (the log says which).")
	descDgramsOverQ    = desc("datagrams_over_quota_total", "Datagrams not relayed: over the sender's share of the next peer's uplink.")
	descQuic           = desc("quic_datagrams_total", "QUIC datagrams (UDP on a peer's quic_ports) by what the quic policy did: refused with ICMP port unreachable (fallback), repaired (repair: rebuilt from parities by the receiver), held (repair: lost, resent while the receiver held the flow), given up (repair: the sender's queue full, or a gap not resent within the deadline), resent (repair: on the peer's request), marked (repair: CE rather than dropped by the sender's queue), parity (repair: parity datagrams sent, its overhead), waited (repair: held behind an earlier gap, then delivered in order), paced (repair: written by the receiver's paced release).", "outcome")
)

// Describe sends every metric's description.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range peerMetrics {
		ch <- m.desc
	}
	for _, d := range []*prometheus.Desc{descPathUp, descPathActive, descPathRTT, descPathLoss, descPathSent, descPathDataSent, descPathReceived, descPathProbes, descPathDowns, descLossEvents, descStreamsOpened, descPeerDrops, descInfo, descFlowsActive,
		descFlows, descFlowsRefused, descBuffered, descTunPackets, descTunDrops, descStreamsBadSrc, descUDPPackets, descUDPDrops,
		descInitiations, descHandshakeTimeo, descCookiesSent, descCookiesRcvd,
		descSYNDropped, descSYNEvicted, descCookies, descFlowsOverQuota, descDgramsOverQ, descQuic, descControlBound} {
		ch <- d
	}
}

// Collect reads one Status and sends its metrics.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st, ok := c.status()
	if !ok {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	buffered := 0
	for i := range st.Peers {
		p := &st.Peers[i]
		a := &p.Association
		for _, m := range peerMetrics {
			ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.val(p), p.Name)
		}
		counter(descLossEvents, a.LossEventsCongestion, p.Name, "congestion")
		counter(descLossEvents, a.LossEventsCorruption, p.Name, "corruption")
		counter(descLossEvents, a.LossEventsOutage, p.Name, "outage")
		counter(descStreamsOpened, a.StreamsOpened, p.Name, "local")
		counter(descStreamsOpened, a.StreamsAccepted, p.Name, "peer")
		counter(descPeerDrops, a.BadPackets, p.Name, "malformed")
		counter(descPeerDrops, a.DuplicatePackets, p.Name, "duplicate")
		counter(descPeerDrops, a.DatagramsDropped, p.Name, "datagram_queue")
		counter(descPeerDrops, a.RecvRangeDrops, p.Name, "range_limit")
		buffered += a.BufferedBytes
		for _, ph := range p.Paths {
			gauge(descPathUp, b2f(ph.Up), p.Name, ph.Name)
			gauge(descPathActive, b2f(ph.Active), p.Name, ph.Name)
			gauge(descPathRTT, ph.SRTT.Seconds(), p.Name, ph.Name)
			gauge(descPathLoss, ph.Loss, p.Name, ph.Name)
			counter(descPathSent, ph.BytesSent, p.Name, ph.Name)
			counter(descPathDataSent, ph.DataBytesSent, p.Name, ph.Name)
			counter(descPathReceived, ph.BytesReceived, p.Name, ph.Name)
			counter(descPathProbes, ph.ProbesSent, p.Name, ph.Name)
			counter(descPathDowns, ph.Downs, p.Name, ph.Name)
		}
	}
	k := st.Counters
	gauge(descInfo, 1, st.Interface, st.Listen, st.PublicKey)
	gauge(descFlowsActive, float64(k.FlowsActive))
	counter(descFlows, k.FlowsOpened, "local")
	counter(descFlows, k.FlowsAccepted, "peer")
	counter(descFlowsRefused, k.FlowsRefused)
	gauge(descBuffered, float64(buffered))
	counter(descTunPackets, k.TunPackets)
	counter(descTunDrops, k.TunNoPeer, "no_peer")
	counter(descTunDrops, k.TunMalformed, "malformed")
	counter(descTunDrops, k.TunBadChecksum, "bad_checksum")
	counter(descTunDrops, k.TunBadSrc, "spoofed_source")
	counter(descTunDrops, k.DatagramsBadSrc, "datagram_bad_source")
	counter(descStreamsBadSrc, k.StreamsBadSrc)
	counter(descTunDrops, k.TunNoAssoc, "no_association")
	counter(descUDPPackets, k.UDPIn)
	for reason, n := range st.Security.Drops {
		counter(descUDPDrops, n, reason)
	}
	counter(descUDPDrops, k.UDPStale, "stale_association")
	counter(descUDPDrops, k.RxQueueDrops, "peer_queue_full")
	counter(descInitiations, st.Security.InitiationsSent)
	counter(descHandshakeTimeo, st.Security.HandshakeTimeouts)
	counter(descCookiesSent, st.Security.CookieRepliesSent)
	counter(descCookiesRcvd, st.Security.CookiesReceived)
	counter(descSYNDropped, k.SYNDropped)
	counter(descSYNEvicted, k.SYNEvicted)
	counter(descCookies, k.SYNCookiesSent, "sent")
	counter(descCookies, k.SYNCookiesAccepted, "accepted")
	counter(descCookies, k.SYNCookiesRejected, "rejected")
	counter(descCookies, k.SYNCookieDrops, "dropped")
	counter(descFlowsOverQuota, k.FlowsOverQuota)
	counter(descDgramsOverQ, k.DatagramsOverQuota)
	counter(descQuic, k.QuicRefused, "refused")
	counter(descQuic, k.QuicRepaired, "repaired")
	counter(descQuic, k.QuicGivenUp, "given_up")
	counter(descQuic, k.QuicHeld, "held")
	counter(descQuic, k.QuicResent, "resent")
	counter(descQuic, k.QuicMarked, "marked")
	counter(descQuic, k.QuicParities, "parity")
	counter(descQuic, k.QuicWaited, "waited")
	counter(descQuic, k.QuicPaced, "paced")
	gauge(descControlBound, b2f(st.Control.Bound))
}
