// Package tunnel is the endpoint: it joins the TUN device, the gVisor stack,
// the peers' secure channels and one SCPS-TP association per peer.
//
// The path of a packet:
//
//	TUN read  -> TCP?  yes -> stack (terminates TCP) -> flow -> stream of the peer's association
//	                   no  -> datagram on the association of the peer owning the destination
//	UDP read  -> peers (authenticate, decrypt) -> association -> streams / datagrams
//	                   UDP on a QUIC port -> refused (ICMP), or numbered with parities (quic.go)
//	stream opened by a peer -> stack dial from the client's own address -> TUN
//	datagram from a peer    -> TUN, unchanged
//
// spec.md beside this file gives the tunnel's own formats byte by byte
// (association parameters, stream metadata, datagrams, reset codes).
package tunnel

// Where things are. Each file holds the type it is named after, or the
// part of the endpoint named in its first comment.
//
// The endpoint:
//
//	endpoint.go           Endpoint and Stats: New, Run, Reload, the peer
//	                      table of associations
//	system.go             the OS parts behind interfaces (TUN, PacketConn,
//	                      NetConfig) and Options, so tests run without root
//	memory.go             the memory budget split among stack and peers
//
// The packet path:
//
//	io.go                 TUN reads and writes, UDP reads and writes, the
//	                      routing of packets from the TUN
//	vnet.go               TUN reads of whole TSO segments (virtio-net header)
//	packet.go             IP header inspection: version, protocol, addresses
//	unreachable.go        ICMP unreachable for packets no peer owns
//	udp_linux.go          the association socket: sendmmsg, recvmmsg, UDP
//	                      GSO and GRO
//	peerrx.go             peerRx: each peer's bounded receive queue and
//	                      goroutine
//
// Peers and flows:
//
//	assoc.go              assoc: one peer's association, its handshakes,
//	                      sealing, streams and datagrams
//	params.go             assocParams: the association parameters in the
//	                      handshake payload
//	packetsize.go         how big the association's packets are (path MTU)
//	multipath.go          a peer's several paths: their sockets, the paths
//	                      learned from the peer, where each packet goes,
//	                      their status
//	pathstate.go          pathStore: what each association learned of its
//	                      peer's path, in memory and in state_dir, for the
//	                      next association's careful resume
//	flow.go               flows: a TCP connection carried as a stream, both
//	                      ends, the hub's relay of streams
//	meta.go               flowMeta: stream metadata (the flow's addresses)
//	quota.go              per-peer quotas at a hub: flows and relayed
//	                      datagrams
//	quic.go               the quic policy for UDP on quic_ports: fallback
//	                      (ICMP port unreachable), repair (the sender's
//	                      blocks, the receiver's in-order delivery)
//	fec.go                repair's erasure coding (P and Q parities) and
//	                      its frames
//	fec_compact.go        repair's compact datagram frames (a flow's
//	                      inner IP and UDP headers left out)
//	uplink.go             the uplink rate measured toward each peer, for
//	                      peers' bound on cookie replies
//
// The operating system:
//
//	netconf_linux.go      netConf: TUN addresses and routes
//	privilege_linux.go    what a non-root endpoint needs (CAP_NET_ADMIN)
//
// Watching it:
//
//	status.go             Status: the snapshot status and metrics read
//	control.go            the control socket `scpsvpn status` asks
//	metrics.go            the Prometheus collector
//
// Tests run whole endpoints without root over an in-memory TUN and UDP
// wire (harness_test.go, with the doubles of tunnel/tunneltest, which
// other packages' tests may use too).
