package tunnel

// Flows: one local TCP connection carried as one stream of an association.
// The opening side accepts the client's connection at once (optimistic open)
// and sends the stream's metadata with its first data; the far side dials the
// server from the client's own address through its stack. A refusal or reset
// at either end becomes a reset at the other; a FIN becomes a FIN.

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"scpsvpn/scps"
	"scpsvpn/stack"
)

// Stream reset codes carried to the far side.
const (
	codeRefused  = 1 // the far side could not connect to the server
	codeReset    = 2 // one of the TCP ends reset its connection
	codeShutdown = 3 // the endpoint is stopping
	codeDenied   = 4 // metadata malformed or not allowed for this peer
)

// dialTimeout bounds the far side's connection attempt; a SYN to a host that
// never answers fails here rather than holding the client forever.
const dialTimeout = 30 * time.Second

// handleTCP is called by the stack for each new local connection (a SYN).
func (e *Endpoint) handleTCP(req *stack.TCPRequest) {
	a := e.assocFor(req.Dst.Addr())
	if a == nil {
		e.stats.FlowsRefused.Add(1)
		e.log.Debug("flow refused: no peer owns the destination", "src", req.Src, "dst", req.Dst)
		req.Refuse()
		return
	}
	// The request holds a netstack slot from its SYN on: it counts as held
	// while it waits for the association too.
	e.stats.FlowsHeld.Add(1)
	go func() {
		defer e.stats.FlowsHeld.Add(-1)
		e.carryOut(a, req)
	}()
}

// carryOut serves a local client's connection through the peer's association.
// The local handshake finishes before the stream opens: a SYN whose client
// never completes it (a spoofed flood) costs the far side no stream and no
// dial. On the LAN that handshake takes a fraction of a millisecond.
func (e *Endpoint) carryOut(a *assoc, req *stack.TCPRequest) {
	if _, err := a.waitAssociation(e.ctx); err != nil {
		e.stats.FlowsRefused.Add(1)
		e.log.Debug("flow refused: no association", "peer", a.cfg.Name, "src", req.Src, "dst", req.Dst, "err", err)
		req.Refuse()
		return
	}
	conn, err := req.Accept()
	if err != nil {
		e.log.Debug("flow: local accept failed", "src", req.Src, "dst", req.Dst, "err", err)
		return
	}
	st, err := a.openStream(e.ctx, flowMeta{src: req.Src, dst: req.Dst}.marshal())
	if err != nil {
		e.stats.FlowsRefused.Add(1)
		e.log.Debug("flow reset: cannot open stream", "peer", a.cfg.Name, "src", req.Src, "dst", req.Dst, "err", err)
		conn.Abort()
		return
	}
	e.stats.FlowsOpened.Add(1)
	e.log.Debug("flow open", "peer", a.cfg.Name, "src", req.Src, "dst", req.Dst, "stream", st.ID())
	e.splice(connEnd{conn}, streamEnd{st})
}

// serveStream re-originates a connection a peer opened.
func (e *Endpoint) serveStream(a *assoc, st *scps.Stream) {
	m, err := parseMeta(st.Meta())
	if err != nil {
		e.stats.FlowsRefused.Add(1)
		e.log.Debug("stream denied: bad metadata", "peer", a.cfg.Name, "err", err)
		st.Reset(codeDenied)
		return
	}
	// A peer may only speak for its own subnets, as with WireGuard's
	// allowed IPs: anything else would let it spoof our other sites.
	if !a.speaksFor(m.src.Addr()) {
		e.stats.FlowsRefused.Add(1)
		e.stats.StreamsBadSrc.Add(1)
		e.log.Warn("stream denied: source not in the peer's subnets", "peer", a.cfg.Name, "src", m.src)
		st.Reset(codeDenied)
		return
	}
	// A hub relays a flow between two of its peers stream to stream,
	// without a detour through its own kernel.
	if other := e.assocFor(m.dst.Addr()); other != nil {
		if other == a {
			e.stats.FlowsRefused.Add(1)
			st.Reset(codeDenied) // the peer's own subnet: a routing loop
			return
		}
		if !e.admitFlow(&a.quota.streams) {
			e.stats.FlowsRefused.Add(1)
			e.log.Debug("relay refused: the peer is at its share of flows", "from", a.cfg.Name, "to", other.cfg.Name)
			st.Reset(codeRefused)
			return
		}
		defer e.releaseFlow(&a.quota.streams)
		out, err := other.openStream(e.ctx, st.Meta())
		if err != nil {
			e.stats.FlowsRefused.Add(1)
			st.Reset(codeRefused)
			return
		}
		e.stats.FlowsAccepted.Add(1)
		e.log.Debug("flow relayed", "from", a.cfg.Name, "to", other.cfg.Name, "src", m.src, "dst", m.dst)
		e.splice(streamEnd{st}, streamEnd{out})
		return
	}
	if !e.admitFlow(&a.quota.served) {
		e.stats.FlowsRefused.Add(1)
		e.log.Debug("flow refused: the peer is at its share of flows", "peer", a.cfg.Name, "src", m.src, "dst", m.dst)
		st.Reset(codeRefused)
		return
	}
	defer e.releaseFlow(&a.quota.served)
	ctx, cancel := context.WithTimeout(e.ctx, dialTimeout)
	dialStart := time.Now()
	conn, err := e.stk.DialTCP(ctx, m.src, m.dst)
	cancel()
	if err != nil {
		e.stats.FlowsRefused.Add(1)
		e.log.Debug("flow refused by server", "peer", a.cfg.Name, "src", m.src, "dst", m.dst, "err", err)
		st.Reset(codeRefused)
		return
	}
	e.stats.FlowsAccepted.Add(1)
	e.log.Debug("flow open", "peer", a.cfg.Name, "src", m.src, "dst", m.dst, "stream", st.ID(), "dial", time.Since(dialStart))
	e.splice(connEnd{conn}, streamEnd{st})
}

// flowEnd is one side of a spliced flow: a local TCP connection or a stream.
type flowEnd interface {
	io.Reader
	io.Writer
	CloseWrite() error
	Close() error
	abort()
}

type connEnd struct{ *stack.Conn }

func (c connEnd) abort() { c.Abort() }

type streamEnd struct{ *scps.Stream }

func (s streamEnd) abort() { s.Reset(codeReset) }

// splice copies both ways until both directions have ended. A clean end of
// one direction is passed on as a FIN (half-close); any error resets both.
func (e *Endpoint) splice(x, y flowEnd) {
	e.stats.FlowsActive.Add(1)
	defer e.stats.FlowsActive.Add(-1)

	var once sync.Once
	abort := func() {
		once.Do(func() {
			x.abort()
			y.abort()
		})
	}
	half := func(dst, src flowEnd) {
		if err := copyData(e.copyBufs, dst, src); err != nil {
			abort()
		} else if err := dst.CloseWrite(); err != nil {
			abort()
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		half(y, x)
	}()
	half(x, y)
	wg.Wait()
	x.Close()
	y.Close()
}

// idleCopyBuf is the buffer a flow's direction waits for data with: a
// full TUN packet's payload and more, so a trickle never needs the pool.
const idleCopyBuf = 2 << 10

// bufPool is where copyData takes its large buffers (a *sync.Pool).
type bufPool interface {
	Get() any
	Put(any)
}

// copyData copies src to dst until src ends. A flow holds a large pooled
// buffer only while data streams: it waits for data with a small buffer
// of its own, takes a large one when a read fills the small one, and
// gives it back after a read that does not fill it (the source has
// drained, and the next read may wait). An idle flow then costs
// idleCopyBuf per direction instead of a large buffer held through its
// blocked read, which at thousands of idle connections was most of the
// endpoint's memory.
func copyData(bufs bufPool, dst io.Writer, src io.Reader) error {
	if c, ok := src.(connEnd); ok {
		if st, ok := dst.(streamEnd); ok {
			return copyToStream(st.Stream, c.Conn)
		}
	}
	small := make([]byte, idleCopyBuf)
	var large *[]byte
	defer func() {
		if large != nil {
			bufs.Put(large)
		}
	}()
	for {
		buf := small
		if large != nil {
			buf = *large
		}
		n, rerr := src.Read(buf)
		if n > 0 {
			w, werr := dst.Write(buf[:n])
			if werr == nil && w < n {
				werr = io.ErrShortWrite
			}
			if werr != nil {
				if errors.Is(werr, io.EOF) {
					return nil
				}
				return werr
			}
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				return nil
			}
			return rerr
		}
		switch {
		case large == nil && n == len(small):
			large = bufs.Get().(*[]byte)
		case large != nil && n < len(*large):
			bufs.Put(large)
			large = nil
		}
	}
}

// copyToStream copies a local connection's data into its stream from the
// stack's buffers straight into the stream's: one copy of every byte, not
// two through a copy buffer, and no buffer of its own, idle or not. It
// waits for the connection's bytes or the stream's end, whichever comes
// first: a stream that ends (its association closed or reset) while the
// local end sends nothing ends the flow here, and the abort that follows
// frees the other direction even if it is blocked writing to a local
// end that no longer acknowledges. A hub's reload takes a removed
// spoke's routes away before its flows end, so the server's ACKs stop
// reaching the stack; waiting on the connection alone, a flow whose
// write to the server was blocked then stayed open until the server's
// own timeout (TestFlowEndsWhileLocalWriteBlocked).
func copyToStream(dst *scps.Stream, src *stack.Conn) error {
	fill := func(w io.Writer, max int) (int, error) { return src.ReadSome(w, max) }
	for {
		_, err := dst.WriteWith(fill)
		switch {
		case errors.Is(err, stack.ErrWouldBlock):
			src.WaitReadable(dst.Gone())
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return err
		}
	}
}
