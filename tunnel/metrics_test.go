package tunnel

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"scpsvpn/peers"
	"scpsvpn/scps"
)

func sampleStatus() Status {
	return Status{
		Interface: "scps0", Listen: "0.0.0.0:4700", PublicKey: "PUB",
		Counters: Counters{TunPackets: 100, TunNoPeer: 2, TunBadChecksum: 19, TunBadSrc: 4, FlowsOpened: 7, FlowsAccepted: 3, FlowsRefused: 1, FlowsActive: 4, UDPIn: 90, UDPStale: 4, TunNoAssoc: 3,
			SYNDropped: 12, SYNEvicted: 13, SYNCookiesSent: 16, SYNCookiesAccepted: 17, SYNCookiesRejected: 18, FlowsOverQuota: 14, DatagramsOverQuota: 15,
			QuicRefused: 21, QuicRepaired: 22, QuicGivenUp: 23, QuicHeld: 24, QuicResent: 25, QuicMarked: 26, QuicParities: 27, QuicWaited: 28, QuicPaced: 29},
		Security: peers.Stats{Drops: map[string]uint64{"replay": 5, "auth": 0}, InitiationsSent: 2, CookieRepliesSent: 11},
		Peers: []PeerStatus{{
			Name: "site-b", Up: true, Handshakes: 3, LastHandshake: time.Unix(1700000000, 500_000_000),
			Association: scps.Stats{
				SRTT: 600 * time.Millisecond, Cwnd: 150000, PacingRate: 1.25e6,
				StreamBytesReceived: 5 << 20, RetransmitBytes: 1000,
				LossEventsCongestion: 1, LossEventsCorruption: 9,
				Outages: 2, OutageTime: 21500 * time.Millisecond,
				StreamsOpen: 4, StreamsOpened: 7, StreamsAccepted: 3,
				DuplicatePackets: 6, BufferedBytes: 65536,
			},
		}, {
			Name: "site-c", Association: scps.Stats{BufferedBytes: 8192},
		}},
	}
}

// The collector turns one Status into metrics with the documented names,
// labels, types and units (seconds, bytes), and they pass promlint.
func TestCollectorMetrics(t *testing.T) {
	c := newCollector(func() (Status, bool) { return sampleStatus(), true })
	want := `
# HELP scpsvpn_peer_up 1 while the association with the peer carries traffic (handshake done, not in an outage).
# TYPE scpsvpn_peer_up gauge
scpsvpn_peer_up{peer="site-b"} 1
scpsvpn_peer_up{peer="site-c"} 0
# HELP scpsvpn_peer_rtt_seconds Smoothed round-trip time of the association.
# TYPE scpsvpn_peer_rtt_seconds gauge
scpsvpn_peer_rtt_seconds{peer="site-b"} 0.6
scpsvpn_peer_rtt_seconds{peer="site-c"} 0
# HELP scpsvpn_peer_last_handshake_timestamp_seconds Unix time of the last completed handshake with the peer; 0 if none.
# TYPE scpsvpn_peer_last_handshake_timestamp_seconds gauge
scpsvpn_peer_last_handshake_timestamp_seconds{peer="site-b"} 1.7000000005e+09
scpsvpn_peer_last_handshake_timestamp_seconds{peer="site-c"} 0
# HELP scpsvpn_peer_outage_seconds_total Time spent in outage mode, the current outage included.
# TYPE scpsvpn_peer_outage_seconds_total counter
scpsvpn_peer_outage_seconds_total{peer="site-b"} 21.5
scpsvpn_peer_outage_seconds_total{peer="site-c"} 0
# HELP scpsvpn_peer_loss_events_total Loss events by the cause they were attributed to; only congestion shrinks the window.
# TYPE scpsvpn_peer_loss_events_total counter
scpsvpn_peer_loss_events_total{cause="congestion",peer="site-b"} 1
scpsvpn_peer_loss_events_total{cause="congestion",peer="site-c"} 0
scpsvpn_peer_loss_events_total{cause="corruption",peer="site-b"} 9
scpsvpn_peer_loss_events_total{cause="corruption",peer="site-c"} 0
scpsvpn_peer_loss_events_total{cause="outage",peer="site-b"} 0
scpsvpn_peer_loss_events_total{cause="outage",peer="site-c"} 0
# HELP scpsvpn_peer_stream_received_bytes_total Stream (TCP payload) bytes from the peer delivered in order.
# TYPE scpsvpn_peer_stream_received_bytes_total counter
scpsvpn_peer_stream_received_bytes_total{peer="site-b"} 5.24288e+06
scpsvpn_peer_stream_received_bytes_total{peer="site-c"} 0
# HELP scpsvpn_flows_total TCP connections carried, by where they started: local (a LAN client here) or peer (re-originated here).
# TYPE scpsvpn_flows_total counter
scpsvpn_flows_total{origin="local"} 7
scpsvpn_flows_total{origin="peer"} 3
# HELP scpsvpn_handshake_cookie_replies_sent_total Initiations answered with a cookie instead of a handshake (we were under load).
# TYPE scpsvpn_handshake_cookie_replies_sent_total counter
scpsvpn_handshake_cookie_replies_sent_total 11
# HELP scpsvpn_flows_active TCP connections carried now.
# TYPE scpsvpn_flows_active gauge
scpsvpn_flows_active 4
# HELP scpsvpn_buffered_bytes Memory held by every association's stream buffers.
# TYPE scpsvpn_buffered_bytes gauge
scpsvpn_buffered_bytes 73728
# HELP scpsvpn_udp_drops_total Datagrams on the association socket dropped before reaching an association, by reason.
# TYPE scpsvpn_udp_drops_total counter
scpsvpn_udp_drops_total{reason="auth"} 0
scpsvpn_udp_drops_total{reason="peer_queue_full"} 0
scpsvpn_udp_drops_total{reason="replay"} 5
scpsvpn_udp_drops_total{reason="stale_association"} 4
# HELP scpsvpn_tun_drops_total Packets from the TUN, or peers' datagrams for it, dropped, by reason.
# TYPE scpsvpn_tun_drops_total counter
scpsvpn_tun_drops_total{reason="bad_checksum"} 19
scpsvpn_tun_drops_total{reason="datagram_bad_source"} 0
scpsvpn_tun_drops_total{reason="malformed"} 0
scpsvpn_tun_drops_total{reason="no_association"} 3
scpsvpn_tun_drops_total{reason="no_peer"} 2
scpsvpn_tun_drops_total{reason="spoofed_source"} 4
# HELP scpsvpn_syn_dropped_total LAN clients' SYNs the netstack dropped with every handshake slot taken (a SYN flood).
# TYPE scpsvpn_syn_dropped_total counter
scpsvpn_syn_dropped_total 12
# HELP scpsvpn_syn_evicted_total Local handshakes in progress ended by the SYN guard to make room for newer SYNs.
# TYPE scpsvpn_syn_evicted_total counter
scpsvpn_syn_evicted_total 13
# HELP scpsvpn_syn_cookies_total SYN cookies while the handshake guard was full (a SYN flood), by outcome: sent (a SYN answered), accepted (an ACK with a valid cookie opened a connection), rejected (wrong or expired), dropped (queue full).
# TYPE scpsvpn_syn_cookies_total counter
scpsvpn_syn_cookies_total{outcome="accepted"} 17
scpsvpn_syn_cookies_total{outcome="dropped"} 0
scpsvpn_syn_cookies_total{outcome="rejected"} 18
scpsvpn_syn_cookies_total{outcome="sent"} 16
# HELP scpsvpn_flows_over_quota_total Streams a peer opened past its share of max_flows, refused.
# TYPE scpsvpn_flows_over_quota_total counter
scpsvpn_flows_over_quota_total 14
# HELP scpsvpn_control_socket_bound 1 while the endpoint holds its abstract control socket name, where scpsvpn status finds it; 0 when another process took the name first (the log says which).
# TYPE scpsvpn_control_socket_bound gauge
scpsvpn_control_socket_bound 0
# HELP scpsvpn_datagrams_over_quota_total Datagrams not relayed: over the sender's share of the next peer's uplink.
# TYPE scpsvpn_datagrams_over_quota_total counter
scpsvpn_datagrams_over_quota_total 15
# HELP scpsvpn_quic_datagrams_total QUIC datagrams (UDP on a peer's quic_ports) by what the quic policy did: refused with ICMP port unreachable (fallback), repaired (repair: rebuilt from parities by the receiver), held (repair: lost, resent while the receiver held the flow), given up (repair: the sender's queue full, or a gap not resent within the deadline), resent (repair: on the peer's request), marked (repair: CE rather than dropped by the sender's queue), parity (repair: parity datagrams sent, its overhead), waited (repair: held behind an earlier gap, then delivered in order), paced (repair: written by the receiver's paced release).
# TYPE scpsvpn_quic_datagrams_total counter
scpsvpn_quic_datagrams_total{outcome="given_up"} 23
scpsvpn_quic_datagrams_total{outcome="held"} 24
scpsvpn_quic_datagrams_total{outcome="marked"} 26
scpsvpn_quic_datagrams_total{outcome="paced"} 29
scpsvpn_quic_datagrams_total{outcome="parity"} 27
scpsvpn_quic_datagrams_total{outcome="refused"} 21
scpsvpn_quic_datagrams_total{outcome="repaired"} 22
scpsvpn_quic_datagrams_total{outcome="resent"} 25
scpsvpn_quic_datagrams_total{outcome="waited"} 28
`
	names := []string{"scpsvpn_peer_up", "scpsvpn_peer_rtt_seconds", "scpsvpn_peer_last_handshake_timestamp_seconds",
		"scpsvpn_peer_outage_seconds_total", "scpsvpn_peer_loss_events_total", "scpsvpn_peer_stream_received_bytes_total",
		"scpsvpn_flows_total", "scpsvpn_flows_active", "scpsvpn_handshake_cookie_replies_sent_total", "scpsvpn_buffered_bytes", "scpsvpn_udp_drops_total", "scpsvpn_tun_drops_total",
		"scpsvpn_syn_dropped_total", "scpsvpn_syn_evicted_total", "scpsvpn_syn_cookies_total", "scpsvpn_flows_over_quota_total", "scpsvpn_datagrams_over_quota_total",
		"scpsvpn_quic_datagrams_total", "scpsvpn_control_socket_bound"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	// Every described metric is collected, and nothing undescribed.
	if n := testutil.CollectAndCount(c); n < len(peerMetrics)*2 {
		t.Errorf("%d metrics collected, want at least %d", n, len(peerMetrics)*2)
	}
}

// An endpoint that is not up yet reports nothing (and reads no state).
func TestCollectorBeforeReady(t *testing.T) {
	c := newCollector(func() (Status, bool) { return Status{}, false })
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Errorf("%d metrics before the endpoint is ready", n)
	}
}

// TestCollectorPathMetrics: a peer with several paths gets one series
// per path of each path metric; a peer of one path none.
func TestCollectorPathMetrics(t *testing.T) {
	st := sampleStatus()
	st.Peers[0].Paths = []PathStatus{
		{PathStats: scps.PathStats{Index: 0, Name: "geo", Up: false, SRTT: 600 * time.Millisecond, BytesSent: 1000, DataBytesSent: 900, Downs: 1}},
		{PathStats: scps.PathStats{Index: 1, Name: "lte", Backup: true, Up: true, Active: true, SRTT: 60 * time.Millisecond, BytesSent: 500, DataBytesSent: 400, ProbesSent: 7}},
	}
	c := newCollector(func() (Status, bool) { return st, true })
	want := `
# HELP scpsvpn_path_up 1 while the path's packets are acknowledged (docs/multipath.md).
# TYPE scpsvpn_path_up gauge
scpsvpn_path_up{path="geo",peer="site-b"} 0
scpsvpn_path_up{path="lte",peer="site-b"} 1
# HELP scpsvpn_path_active 1 while the path carries the association's data.
# TYPE scpsvpn_path_active gauge
scpsvpn_path_active{path="geo",peer="site-b"} 0
scpsvpn_path_active{path="lte",peer="site-b"} 1
# HELP scpsvpn_path_data_sent_bytes_total Bytes of packets sent on the path that carried stream data or datagrams.
# TYPE scpsvpn_path_data_sent_bytes_total counter
scpsvpn_path_data_sent_bytes_total{path="geo",peer="site-b"} 900
scpsvpn_path_data_sent_bytes_total{path="lte",peer="site-b"} 400
# HELP scpsvpn_path_downs_total Times the path went down.
# TYPE scpsvpn_path_downs_total counter
scpsvpn_path_downs_total{path="geo",peer="site-b"} 1
scpsvpn_path_downs_total{path="lte",peer="site-b"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "scpsvpn_path_up", "scpsvpn_path_active", "scpsvpn_path_data_sent_bytes_total", "scpsvpn_path_downs_total"); err != nil {
		t.Error(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}
