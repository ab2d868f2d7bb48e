package tunnel

// One association over several links to a peer (docs/multipath.md): the
// tunnel's part. The association (scps) numbers the paths and says which
// path each packet goes on; here each number becomes a socket and an
// address.
//
//   - A peer's configured paths ([[peer.path]]) are paths 0..n-1. Each has
//     its own socket, bound to the path's local address (or interface,
//     SO_BINDTODEVICE) on a port of the kernel's choosing, and packets of
//     path i leave from it to the path's endpoint; handshakes toward a
//     path's endpoint leave from it too (sendUDP). A packet from the peer
//     is path i when path i's socket took it, or when it came to the
//     listen socket from path i's endpoint address.
//   - A side that learns its peer's paths (the peer said in its handshake
//     that it runs several: capMultipath) numbers each new source address
//     of the peer's authenticated association packets as a path (after
//     its configured ones, if any), as a roaming endpoint is learned, and
//     sends on it from the listen socket. A full table reuses a retired
//     path's number, else the one heard from longest ago.
//   - A peer with no paths at either end keeps the single path of old:
//     path 0, to the endpoint peers knows, byte for byte as before.

import (
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"scpsvpn/configs"
	"scpsvpn/peers"
	"scpsvpn/scps"
	"scpsvpn/scps/cc"
)

// capMultipath is the capability bit (assocParams.caps, spec.md) of a side
// that runs several paths to the peer: the peer learns them from its
// packets.
const capMultipath = 0x01

// learnedPaths is an association's table of paths learned from the peer's
// packets: their source addresses by path number. The peer's receive
// routine writes it; the session goroutine reads the addresses.
type learnedPaths struct {
	on    bool // learning: we run paths, or the peer does
	first int  // the first number a learned path may take (after the configured ones)
	addr  [scps.MaxPaths]atomic.Pointer[netip.AddrPort]
	heard [scps.MaxPaths]time.Time // receive routine only
}

// pathOptions are the association's paths from the peer's configuration,
// each after the first resuming from what an earlier association saved of
// it (path 0 resumes from the association's entry, scps Config.Resume).
func (a *assoc) pathOptions(learn bool) []scps.PathOptions {
	var out []scps.PathOptions
	now := time.Now()
	for i, pc := range a.cfg.Paths {
		o := scps.PathOptions{Name: pc.Name, Backup: pc.Backup, InitialRTT: pc.Link.RTT, UntoldRTT: pc.RTTUntold, SendRate: pc.Link.Up}
		if p, ok := a.e.paths.getPath(pathKey{peer: a.cfg.PublicKey, path: pc.Name}, now); ok && i > 0 {
			o.Resume = cc.Resume{Saved: p}
			a.log.Info("path resuming at the state saved", "path", pc.Name, "rate_bps", int64(p.Rate*8), "min_rtt", p.MinRTT, "age", now.Sub(p.At).Round(time.Second))
		}
		out = append(out, o)
	}
	if len(out) == 0 && learn {
		// Path 0 is the first source the peer's packets come from.
		out = append(out, scps.PathOptions{Learned: true, InitialRTT: a.cfg.Link.RTT})
	}
	return out
}

// openPaths opens the sockets of the peer's configured paths and starts
// their readers. A path whose socket cannot be opened (its address is not
// up yet) sends from the listen socket, where the routing table decides.
func (e *Endpoint) openPaths(a *assoc) {
	a.psocks = make([]PacketConn, len(a.cfg.Paths))
	for i, pc := range a.cfg.Paths {
		open := e.opts.PathConn
		if open == nil {
			open = func(pc configs.PathConfig) (PacketConn, error) { return openPathSock(pc, e.log) }
		}
		s, err := open(pc)
		if err != nil {
			a.log.Warn("path socket: sending from the listen socket instead", "path", pc.Name, "err", err)
			continue
		}
		a.psocks[i] = s
		e.pathSocks.Store(pc.Endpoint, s)
		a.log.Info("path", "path", pc.Name, "local", s.LocalAddr(), "endpoint", pc.Endpoint, "backup", pc.Backup)
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.readPath(s, i)
		}()
	}
}

// closePaths closes the peer's path sockets; their readers end.
func (e *Endpoint) closePaths(a *assoc) {
	for i, s := range a.psocks {
		if s == nil {
			continue
		}
		e.pathSocks.CompareAndDelete(a.cfg.Paths[i].Endpoint, s)
		s.Close()
	}
}

// readPath reads path i's socket until it closes.
func (e *Endpoint) readPath(s PacketConn, i int) {
	var plain *[]byte
	timer, _ := s.(arrivalTimer)
	handle := func(src netip.AddrPort, pkt []byte) { plain = e.handleUDP(src, pkt, plain, i, arrivedAt(timer)) }
	for {
		if err := s.Receive(handle); err != nil {
			if !isClosed(err) && e.ctx.Err() == nil {
				e.log.Error("UDP read on a path", "path_index", i, "err", err)
			}
			return
		}
	}
}

func isClosed(err error) bool { return err != nil && errors.Is(err, net.ErrClosed) }

// sockFor is the socket that sends to to: the path socket whose endpoint
// it is, else the listen socket.
func (e *Endpoint) sockFor(to netip.AddrPort) PacketConn {
	if s, ok := e.pathSocks.Load(to); ok {
		return s.(PacketConn)
	}
	return e.sock
}

// pathOf is the path number of a packet from the peer (see the file's
// comment); receive routine only.
func (a *assoc) pathOf(as *association, it rxItem) int {
	n := len(a.cfg.Paths)
	if it.via >= 0 && it.via < n {
		return it.via
	}
	for i, pc := range a.cfg.Paths {
		if pc.Endpoint.Addr() == it.src.Addr() {
			return i
		}
	}
	lp := &as.learned
	if !lp.on {
		return 0
	}
	now := time.Now()
	for i := lp.first; i < scps.MaxPaths; i++ {
		if ap := lp.addr[i].Load(); ap != nil && *ap == it.src {
			lp.heard[i] = now
			return i
		}
	}
	slot := lp.slotFor(as.sess.Paths())
	src := it.src
	lp.addr[slot].Store(&src)
	lp.heard[slot] = now
	if err := as.sess.SetPath(slot, scps.PathOptions{Name: src.String(), Learned: true, InitialRTT: a.cfg.Link.RTT}); err != nil {
		a.log.Error("learned path", "err", err)
	}
	a.log.Info("path learned", "path", src, "path_index", slot)
	return slot
}

// slotFor picks the number of a newly learned path: a free one, else a
// retired one, else the one heard from longest ago.
func (lp *learnedPaths) slotFor(paths []scps.PathStats) int {
	for i := lp.first; i < scps.MaxPaths; i++ {
		if lp.addr[i].Load() == nil {
			return i
		}
	}
	for _, p := range paths {
		if p.Retired && p.Index >= lp.first {
			return p.Index
		}
	}
	oldest := lp.first
	for i := lp.first; i < scps.MaxPaths; i++ {
		if lp.heard[i].Before(lp.heard[oldest]) {
			oldest = i
		}
	}
	return oldest
}

// route is where a packet of path i goes: the socket and the address;
// dst is the peer's endpoint as peers knows it (the single path's).
func (a *assoc) route(as *association, i int, dst netip.AddrPort) (PacketConn, netip.AddrPort) {
	if i < len(a.cfg.Paths) {
		if s := a.psocks[i]; s != nil {
			return s, a.cfg.Paths[i].Endpoint
		}
		return a.e.sock, a.cfg.Paths[i].Endpoint
	}
	if ap := as.learned.addr[i].Load(); ap != nil {
		return a.e.sock, *ap
	}
	return a.e.sock, dst
}

// PathStatus is one path of a peer's association in Status: the
// association's view of it and the addresses it runs between.
type PathStatus struct {
	scps.PathStats
	Local    string `json:"local,omitempty"`    // its socket's address
	Endpoint string `json:"endpoint,omitempty"` // where its packets go
}

// pathStatus is the peer's paths, none while it has one path only.
func (a *assoc) pathStatus() []PathStatus {
	as := a.cur.Load()
	var paths []scps.PathStats
	if as != nil {
		paths = as.sess.Paths()
	}
	if len(a.cfg.Paths) == 0 && (as == nil || !as.learned.on) {
		return nil
	}
	var out []PathStatus
	seen := map[int]bool{}
	for _, p := range paths {
		seen[p.Index] = true
		ps := PathStatus{PathStats: p}
		if p.Index < len(a.cfg.Paths) {
			ps.Endpoint = a.cfg.Paths[p.Index].Endpoint.String()
			if s := a.psocks[p.Index]; s != nil {
				ps.Local = s.LocalAddr().String()
			}
		} else if ap := as.learned.addr[p.Index].Load(); ap != nil {
			ps.Endpoint = ap.String()
		}
		out = append(out, ps)
	}
	// Configured paths of a peer with no association yet.
	for i, pc := range a.cfg.Paths {
		if !seen[i] {
			out = append(out, PathStatus{Endpoint: pc.Endpoint.String(), PathStats: scps.PathStats{Index: i, Name: pc.Name, Backup: pc.Backup}})
		}
	}
	return out
}

// multipathCaps is our capability byte for the peer's handshake.
func (a *assoc) multipathCaps() uint8 {
	if len(a.cfg.Paths) > 0 {
		return capMultipath
	}
	return 0
}

// sendPaths seals and sends a batch whose packets may go on different
// paths: each run of packets to one socket and address is one send.
func (a *assoc) sendPaths(as *association, p *peers.Peer, pkts []scps.Packet, bufs [][]byte) {
	var out [][]byte
	var sock PacketConn
	var to netip.AddrPort
	flush := func() {
		if len(out) > 0 {
			if err := sock.Send(out, to); err != nil && a.e.ctx.Err() == nil {
				a.log.Debug("UDP send", "to", to, "err", err)
			}
		}
		out = out[:0]
	}
	for i, pkt := range pkts {
		sealed, dst, err := p.SealOn(as.send.Load(), pkt.Number, pkt.Data, bufs[i])
		if err != nil {
			if errors.Is(err, peers.ErrNoSession) {
				a.connect(false)
			}
			break
		}
		s, d := a.route(as, pkt.Path, dst)
		if !d.IsValid() {
			break
		}
		if s != sock || d != to {
			flush()
			sock, to = s, d
		}
		out = append(out, sealed)
	}
	flush()
}
