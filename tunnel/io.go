package tunnel

// The endpoint's I/O stages: TUN reads (batched, GSO split by wireguard's
// tun), TUN writes, and the association socket's reads and writes (batched
// with recvmmsg and sendmmsg by the real one, udp_linux.go, so the
// association costs few syscalls per packet).

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/tun"

	"scpsvpn/peers"
	"scpsvpn/stack"
)

// readTUN routes every packet the kernel sends into the TUN: TCP into the
// stack, anything else as a datagram to the peer owning the destination.
func (e *Endpoint) readTUN() {
	if e.tunFile != nil {
		e.readTUNOffload(e.tunFile)
		return
	}
	n := e.tun.BatchSize()
	bufs := make([][]byte, n)
	sizes := make([]int, n)
	for i := range bufs {
		bufs[i] = make([]byte, tunOffset+65535)
	}
	tcp := make([][]byte, 0, n)
	for {
		count, err := e.tun.Read(bufs, sizes, tunOffset)
		tcp = tcp[:0]
		for i := 0; i < count; i++ {
			pkt := bufs[i][tunOffset : tunOffset+sizes[i]]
			// wireguard's tun says nothing of what the kernel checked.
			if e.routeFromTUN(pkt, false) {
				tcp = append(tcp, pkt)
			}
		}
		// A batch's TCP segments go to the stack together, which coalesces
		// a flow's consecutive segments (stack.InjectBatch).
		if len(tcp) > 0 {
			e.stk.InjectBatch(tcp)
		}
		if err != nil {
			if errors.Is(err, tun.ErrTooManySegments) {
				continue
			}
			if !errors.Is(err, os.ErrClosed) && e.ctx.Err() == nil {
				e.log.Error("TUN read", "err", err)
			}
			return
		}
	}
}

// routeFromTUN handles a packet read from the TUN, except TCP: true means
// pkt is TCP for the stack, which the caller injects with its batch. A TCP
// segment's checksum is checked unless the kernel vouched for it (vouched,
// vnetPacket): the stack takes the segments it is given as sound, and
// acknowledges them to the client.
func (e *Endpoint) routeFromTUN(pkt []byte, vouched bool) (tcp bool) {
	e.stats.TunPackets.Add(1)
	info, ok := parseIP(pkt)
	if !ok {
		e.stats.TunMalformed.Add(1)
		return false
	}
	if !e.localSource(info.src) {
		return false
	}
	if info.proto == protoTCP {
		if !vouched && !tcpChecksumValid(pkt, info) {
			e.stats.TunBadChecksum.Add(1)
			return false
		}
		return true
	}
	a := e.assocFor(info.dst)
	if a == nil {
		// Routed into the TUN but no peer owns it (or multicast and
		// router chatter the kernel sends into any link): tell the sender
		// rather than black-hole it.
		e.stats.TunNoPeer.Add(1)
		if e.unreach.allow(time.Now()) {
			if reply := unreachable(pkt, info); reply != nil {
				e.writeTUNPacket(reply)
			}
		}
		return false
	}
	if info.proto == protoUDP && e.routeQuic(a, pkt, info) {
		return false
	}
	if err := a.sendDatagram(pkt); err != nil {
		if errors.Is(err, errNotUp) {
			e.stats.TunNoAssoc.Add(1)
		}
		e.log.Debug("datagram dropped", "peer", a.cfg.Name, "err", err)
	}
	return false
}

// localSource reports whether a packet read from our own TUN may carry
// source src. The TUN only carries our side's traffic, so a source inside a
// peer's subnet is a LAN host spoofing that peer's site (towards it, or
// through a hub towards another): such packets are dropped and counted.
func (e *Endpoint) localSource(src netip.Addr) bool {
	p, ok := e.dev.Lookup(src)
	if !ok {
		return true
	}
	e.stats.TunBadSrc.Add(1)
	if e.spoofed.allow(time.Now()) {
		e.log.Warn("packet from the TUN dropped: its source lies in a peer's subnet (a spoofing LAN host, or a peer subnet that covers this site's own LAN)",
			"src", src, "peer", p.Name())
	}
	return false
}

// writeTUN is the stack's output: batches of IP packets with headroom.
func (e *Endpoint) writeTUN(bufs [][]byte, offset int) error {
	_, err := e.tun.Write(bufs, offset)
	return err
}

// tunGSOMax is the largest segment the stack sends into a TUN with
// offloads: with 63 KiB (the most an IPv4 packet carries, less headers)
// instead of 32 KiB the veth benchmark moved about 10% more for the same
// CPU (docs/performance.md). The outbound queue's data buffers grow to
// this size, so the queue is shortened to tunOutQueue and its worst-case
// memory stays at 32 MiB.
const (
	tunGSOMax   = 63 << 10
	tunOutQueue = stack.DefaultOutQueueLen / 2
)

// writeTUNGSO is the stack's output when it sends large segments
// (stack.Config.GSOMaxSize): every packet is written with the virtio-net
// header the stack put in front of it. wireguard's tun.Write cannot be
// used: it writes its own headers, which would not ask the kernel to
// segment or to complete the checksum.
func writeTUNGSO(f *os.File, bufs [][]byte, offset int) error {
	var first error
	for _, b := range bufs {
		if _, err := f.Write(b[offset-stack.VirtioNetHdrLen:]); err != nil && first == nil {
			first = err
		}
	}
	return first
}

var tunBufs = sync.Pool{New: func() any { b := make([]byte, tunOffset+65535); return &b }}

// writeTUNPacket writes one packet that arrived as a datagram.
func (e *Endpoint) writeTUNPacket(p []byte) {
	bp := tunBufs.Get().(*[]byte)
	b := (*bp)[:tunOffset+len(p)]
	copy(b[tunOffset:], p)
	if _, err := e.tun.Write([][]byte{b}, tunOffset); err != nil && e.ctx.Err() == nil {
		e.log.Debug("TUN write", "err", err)
	}
	tunBufs.Put(bp)
}

// readUDP authenticates and dispatches every datagram on the association
// port. Anything that fails is dropped and counted, with no reply.
func (e *Endpoint) readUDP() {
	var plain *[]byte // the next packet's plaintext buffer, from rxBuf
	timer, _ := e.sock.(arrivalTimer)
	handle := func(src netip.AddrPort, pkt []byte) { plain = e.handleUDP(src, pkt, plain, -1, arrivedAt(timer)) }
	for {
		if err := e.sock.Receive(handle); err != nil {
			if !errors.Is(err, net.ErrClosed) && e.ctx.Err() == nil {
				e.log.Error("UDP read", "err", err)
			}
			return
		}
	}
}

// handleUDP decrypts pkt into plain (a buffer from rxBuf, or nil) and
// dispatches it; at is when it reached the host (zero: unknown). An
// association packet is queued for its peer in plain
// itself, which then belongs to the queue; the buffer the next datagram
// may use is returned (plain, when nothing took it). via is the
// configured path whose socket took it (multipath.go), -1 for the listen
// socket.
func (e *Endpoint) handleUDP(src netip.AddrPort, pkt []byte, plain *[]byte, via int, at time.Time) *[]byte {
	e.stats.UDPIn.Add(1)
	if plain == nil || cap(*plain) < len(pkt) {
		if plain != nil {
			rxBufs.Put(plain)
		}
		plain = rxBuf(len(pkt)) // the plaintext is shorter than pkt
	}
	res, err := e.dev.Receive(src, pkt, *plain)
	for _, d := range res.Send {
		select {
		case e.replies <- d:
		default:
			e.stats.RepliesDropped.Add(1)
		}
	}
	if err != nil {
		e.stats.UDPDropped.Add(1)
		return plain
	}
	if res.Peer == nil {
		return plain
	}
	a := e.assocByName(res.Peer.Name())
	if a == nil {
		return plain
	}
	// The peer's own routine does the rest (peerrx.go).
	if res.Established {
		a.rx.pushEstablished(res.Session, res.LocalPayload, res.RemotePayload, res.HandshakeRTT, res.Responder)
	}
	if res.Data != nil {
		a.rx.push(res.Session, res.Counter, plain, len(res.Data), src, via, at)
		return nil
	}
	return plain
}

// arrivedAt is when the datagram a socket is handing over reached the
// host, if the socket knows (arrivalTimer); zero otherwise.
func arrivedAt(t arrivalTimer) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Arrived()
}

// maxQueuedReplies bounds the handshake answers (responses, cookie
// replies, confirmations) waiting for sendReplies. A flood of initiations
// under load is answered at the rate the socket takes; the rest are
// dropped, and their initiators retransmit.
const maxQueuedReplies = 1024

// sendReplies sends what the UDP reader was asked to answer. The reader
// only queues them, and they are sent with SendNow: a reply the socket
// cannot take at once, or that would let replies hold more than their
// share of its buffer (replies to forged on-link addresses wait for ARP
// for seconds), is dropped and counted. Neither the reader nor the
// associations' sends ever wait for a reply to a stranger. A reply to a
// peer's known endpoint (a restarted peer's initiation answered with a
// cookie under a flood) is not dropped for the flood's sake: it is sent as
// the associations' packets are. Those replies are few whatever a flood
// in the peer's name does: peers bounds cookie replies to a share of our
// uplink toward the peer (peers/cookielimit.go).
func (e *Endpoint) sendReplies() {
	var known knownEndpoints
	for {
		select {
		case <-e.ctx.Done():
			return
		case d := <-e.replies:
			if !d.To.IsValid() {
				continue
			}
			err := e.sock.SendNow(d.Data, d.To)
			if errors.Is(err, ErrSocketBusy) && known.has(e.dev, d.To, time.Now()) {
				err = e.sock.Send([][]byte{d.Data}, d.To)
			}
			if err != nil {
				e.stats.RepliesDropped.Add(1)
				if !errors.Is(err, ErrSocketBusy) && e.ctx.Err() == nil {
					e.log.Debug("UDP send", "to", d.To, "err", err)
				}
			}
		}
	}
}

// knownEndpoints is the set of the peers' current endpoints, refreshed at
// most every 100 ms: it is consulted for every reply dropped in a flood.
type knownEndpoints struct {
	at  time.Time
	set map[netip.AddrPort]struct{}
}

func (k *knownEndpoints) has(dev *peers.Device, to netip.AddrPort, now time.Time) bool {
	if k.set == nil || now.Sub(k.at) > 100*time.Millisecond {
		k.at = now
		k.set = map[netip.AddrPort]struct{}{}
		for _, p := range dev.Peers() {
			if ep := p.Endpoint(); ep.IsValid() {
				k.set[ep] = struct{}{}
			}
		}
	}
	_, ok := k.set[to]
	return ok
}

func (e *Endpoint) sendUDP(b []byte, to netip.AddrPort) {
	if !to.IsValid() {
		return
	}
	// A handshake toward a path's endpoint leaves from that path's
	// socket (multipath.go), so the peer learns the path it will use.
	if err := e.sockFor(to).Send([][]byte{b}, to); err != nil && e.ctx.Err() == nil {
		e.log.Debug("UDP send", "to", to, "err", err)
	}
}
