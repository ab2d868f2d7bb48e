// Package scps is the SCPS-TP association of scpsvpn: many reliable,
// ordered byte streams and unreliable datagrams multiplexed over one
// packet exchange with a peer, with selective acknowledgement of every hole,
// thinned ACKs within the return link's rate, loss detection by packet and
// time thresholds, credit-based flow control with windows sized to the
// bandwidth-delay product, pluggable congestion control, loss-cause
// detection (congestion or corruption), pacing at the link rate and link
// outage handling (suspend, probe at a fixed interval, resume at the old
// rate).
//
// The core, Association, does no I/O and keeps no goroutines: packets and
// the time go in, packets and the next deadline come out, so it runs
// deterministically under a simulated clock. Session wraps one Association
// with a goroutine, a timer and blocking Streams for the tunnel. spec.md
// beside this file gives the wire format byte by byte.
package scps

// Where things are. Each file holds the type it is named after, or the
// part of the Association named in its first comment.
//
// The core:
//
//	association.go        Association: state, construction, Deadline, Tick,
//	                      Close, Stats
//	event.go              Event and the event queue (PollEvent)
//	recv.go               Receive: decode, validate, apply frames (the
//	                      streams' through streams.Manager)
//	send.go               Send: plan, assemble, onSent (and sendClose,
//	                      sendProbe, SendDatagram)
//	sendframes.go         the ACK and datagram frame writers (the streams'
//	                      are streams.Manager's)
//	parity.go             tail parity: a burst's last blocks' XOR sent at
//	                      idle, the receiver's kept payloads and rebuild
//	framehandler.go       the frames of acknowledged and lost packets:
//	                      ACKs here, the streams' to streams.Manager
//	outagedetector.go     outageDetector: outage mode, keep-alives, the
//	                      silence hold
//	paths.go              the paths: several links under one association,
//	                      path probes, up/down, the data path, failover
//	bond.go               the bonding scheduler: which working path the
//	                      next packet goes on when several carry data
//	latency.go            the latency scheduler (light streams' data on the
//	                      lowest-delay path) and answers to probes
//	pathtrain.go          ProbePath: the path train that times a fresh
//	                      association's path before its first transfer
//	recvranges.go         dropping packets that break the bound on
//	                      received stream ranges, closing on abuse
//	datagramqueue.go      datagramQueue: outgoing datagrams
//	datagramshare.go      shareBalance: datagrams' and streams' shares of the link
//	streamapi.go          the Association's stream operations: entry points
//	                      to streams.Manager's
//	memory.go             SetMemory: a running association's memory budget
//	config.go             Config, defaults and validation
//	stats.go              Stats
//	errors.go             errors and the package's own error codes
//
// The driver:
//
//	session.go            Session: the goroutine-safe driver of one Association
//	stream.go             Stream: the blocking net.Conn view of a stream
//	deadline.go           deadline: the timer behind Stream's deadlines
//
// Sub-packages: cc (congestion controllers, RTT statistics), varint (the
// variable-length integer, also of the tunnel's formats), internal/wire
// (the byte layout of packets and frames, spec.md), internal/ackhandler
// (ACK and loss handling: the sent-packet history, ACK processing, loss
// detection, probe timeout, tail copies, RTT, loss cause, congestion controller and
// pacer; received packets, the ACK policy and the ACK budget),
// internal/streams (the streams: one stream's state, the stream table
// and send queues, connection-level flow control, the memory budget's
// account and rules, the auto-tuned windows, the bound on received
// ranges, and Manager, which holds them, creates, resets, aborts and
// removes streams, grants credit and applies the streams' frames of
// received, acknowledged and lost packets), internal/ranges (sets of half-open
// ranges), internal/bufq (stream buffers).
