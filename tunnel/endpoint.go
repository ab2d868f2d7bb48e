package tunnel

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.zx2c4.com/wireguard/tun"

	"scpsvpn/configs"
	"scpsvpn/peers"
	"scpsvpn/scps/cc"
	"scpsvpn/stack"
)

// tunOffset is the headroom kept in front of every packet handed to the TUN:
// wireguard's tun needs 10 bytes for the virtio-net header.
const tunOffset = 16

// Endpoint is one running scpsvpn site.
type Endpoint struct {
	log      *slog.Logger
	instance uint64

	mu       sync.Mutex
	running  bool // between bringing the associations up and taking them down
	cfg      *configs.Config
	assocs   map[string]*assoc // by peer name
	announce sync.Map          // peer name -> *assoc, for handshake payloads (read under peers' locks)

	opts     Options
	copyBufs *sync.Pool // the flows' copy buffers, sized by the budget (memory.go)
	tun      TUN
	tunFile  *os.File // the TUN read and written with virtio-net headers (offloadFile); nil without
	net      NetConfig
	sock     PacketConn
	// pathSocks are the configured paths' sockets by the endpoint they
	// send to (multipath.go): handshakes toward it leave from them.
	pathSocks sync.Map // netip.AddrPort -> PacketConn
	stk       *stack.Stack
	dev       *peers.Device
	ctx       context.Context
	stop      context.CancelFunc
	wg        sync.WaitGroup

	stats   Stats
	control atomic.Pointer[controlServer] // set as the control sockets start
	started time.Time
	ready   chan struct{}       // closed once the endpoint carries traffic
	unreach rateLimiter         // ICMP errors for packets no peer owns
	spoofed rateLimiter         // warnings about TUN packets with a peer's source
	replies chan peers.Datagram // handshake answers from the UDP reader to sendReplies
	paths   *pathStore          // what associations learned of each peer's path (pathstate.go)
}

// Stats counts what the endpoint did with packets and flows.
type Stats struct {
	TunPackets         atomic.Uint64 // packets read from the TUN (a kernel TCP segment of up to 64 KB is one)
	TunNoPeer          atomic.Uint64 // non-TCP packets to no peer's subnet, dropped
	TunMalformed       atomic.Uint64
	TunBadChecksum     atomic.Uint64 // TCP segments from the TUN with a wrong checksum the kernel had not vouched for
	DatagramsIn        atomic.Uint64 // datagrams from peers written to the TUN
	DatagramsBadSrc    atomic.Uint64 // datagrams whose source is not the sending peer's
	StreamsBadSrc      atomic.Uint64 // streams whose client address is not the opening peer's
	TunBadSrc          atomic.Uint64 // packets from our own TUN with a source in a peer's subnet
	UDPIn              atomic.Uint64
	UDPDropped         atomic.Uint64 // failed authentication or decoding
	RepliesDropped     atomic.Uint64 // handshake answers dropped: more queued than the socket took, or the socket busy
	RxQueueDrops       atomic.Uint64 // peer packets dropped: that peer's receive queue was full
	UDPStale           atomic.Uint64 // authentic, but of a session that carries no current association
	TunNoAssoc         atomic.Uint64 // datagrams for a peer whose association is not up, dropped
	FlowsOpened        atomic.Uint64 // local TCP connections carried to a peer
	FlowsAccepted      atomic.Uint64 // connections re-originated for a peer
	FlowsRefused       atomic.Uint64
	FlowsOverQuota     atomic.Uint64 // peers' streams refused: the peer at its share of max_flows (quota.go)
	DatagramsOverQuota atomic.Uint64 // datagrams not relayed: over the sender's share of the next peer's uplink
	FlowsActive        atomic.Int64  // flows carrying data (spliced)
	// FlowsHeld counts every flow from the moment it takes a slot (a
	// netstack slot, or a relay's stream) to its end: dials in progress
	// and flows waiting for an association or the next hop too. The
	// per-peer quotas count against it (quota.go).
	FlowsHeld atomic.Int64
	// The quic policy (quic.go): datagrams refused with ICMP (fallback),
	// rebuilt from a block's parities by the receiver, and given up (the
	// sender's queue full or held too long; a gap neither rebuilt nor
	// resent within the deadline).
	QuicRefused  atomic.Uint64
	QuicRepaired atomic.Uint64
	QuicGivenUp  atomic.Uint64
	QuicHeld     atomic.Uint64 // lost datagrams resent while the flow waited
	QuicResent   atomic.Uint64 // datagrams resent on the peer's request
	QuicMarked   atomic.Uint64 // marked CE rather than dropped by the flow's queue
	QuicParities atomic.Uint64 // parity datagrams sent (repair's overhead)
	// QuicWaited counts datagrams the receiver held behind an earlier
	// gap (a loss, or a frame swapped on the way) and delivered once it
	// filled or was given up: the reordering repair turns into delay.
	// QuicPaced counts those written by the paced release (a burst past
	// quicBurst, and whatever came while it ran).
	QuicWaited atomic.Uint64
	QuicPaced  atomic.Uint64
}

// New prepares an endpoint; Run starts it. The zero Options opens the real
// TUN, socket and network configuration.
func New(cfg *configs.Config, log *slog.Logger, opts Options) (*Endpoint, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("random instance: %w", err)
	}
	return &Endpoint{
		log:      log,
		cfg:      cfg,
		opts:     opts,
		copyBufs: copyBufPool(cfg.Memory, cfg.MaxFlows),
		instance: binary.BigEndian.Uint64(b[:]),
		assocs:   map[string]*assoc{},
		ready:    make(chan struct{}),
		unreach:  rateLimiter{perSecond: unreachPerSecond},
		spoofed:  rateLimiter{perSecond: 1},
		replies:  make(chan peers.Datagram, maxQueuedReplies),
		paths:    &pathStore{log: log, m: map[pathKey]cc.PathState{}},
	}, nil
}

// Ready is closed once the TUN device, its addresses and routes, the
// association socket and the associations are up and the pipeline runs
// (systemd's READY=1). It stays open if Run fails before that.
func (e *Endpoint) Ready() <-chan struct{} { return e.ready }

// Run brings the endpoint up and serves until ctx is cancelled, then takes
// down everything it created: associations (peers see their streams reset),
// local TCP connections (reset), routes and the TUN device.
func (e *Endpoint) Run(ctx context.Context) (err error) {
	e.ctx, e.stop = context.WithCancel(ctx)
	defer e.stop()
	cleanup := []func(){}
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}()
	// What the caller gave is ours to close even if Run fails early.
	if e.opts.Conn != nil {
		cleanup = append(cleanup, func() { e.opts.Conn.Close() })
	}
	if e.opts.TUN != nil {
		cleanup = append(cleanup, func() { e.opts.TUN.Close() })
	}

	priv, err := peers.LoadPrivateKeyFile(e.cfg.PrivateKeyFile)
	if err != nil {
		return fmt.Errorf("interface.private_key_file: %w", err)
	}

	// Read once at start: a reload keeps the directory it began with.
	e.paths = openPathStore(e.cfg.StateDir, e.cfg.Name, e.log.With("part", "paths"))

	e.sock = e.opts.Conn
	if e.sock == nil {
		s, err := listenUDP(e.cfg.Listen, e.log)
		if err != nil {
			return err
		}
		e.sock = s
		cleanup = append(cleanup, func() { s.Close() })
	}

	e.dev, err = peers.NewDevice(priv, peerConfigs(e.cfg), peers.Options{
		Payload: e.handshakePayload,
		Logger:  e.log.With("part", "peers"),
	})
	if err != nil {
		return fmt.Errorf("peers: %w", err)
	}

	e.tun = e.opts.TUN
	if e.tun == nil {
		t, err := tun.CreateTUN(e.cfg.Name, e.cfg.MTU)
		if err != nil {
			return fmt.Errorf("create TUN %s (needs CAP_NET_ADMIN%s): %w", e.cfg.Name, tunDeviceHint(), err)
		}
		e.tun = t
		// wireguard's device reports link events on a channel of five that
		// nobody else reads. Once full, its listener goroutines block on it
		// and outlive Close (which closes the channel only after they end).
		go func() {
			for range t.Events() {
			}
		}()
		cleanup = append(cleanup, func() { t.Close() })
	}
	e.net = e.opts.Net
	if e.net == nil {
		n, err := newNetConf(e.cfg.Name)
		if err != nil {
			return err
		}
		e.net = n
	}
	if err := e.net.Up(e.cfg.Addresses); err != nil {
		return err
	}
	if err := e.net.SetRoutes(allSubnets(e.cfg)); err != nil {
		return err
	}
	cleanup = append(cleanup, e.net.Down)

	output := e.writeTUN
	gsoMax, outQueue := 0, 0
	// A real TUN with offloads (wireguard's tun enables IFF_VNET_HDR and
	// TSO, and then reads in batches) takes the stack's large segments and
	// cuts them itself: the stack's TCP then costs per 64 KB, not per
	// 1.4 KB (docs/performance.md).
	if f := offloadFile(e.tun); f != nil {
		e.tunFile = f
		gsoMax, outQueue = tunGSOMax, tunOutQueue
		output = func(bufs [][]byte, offset int) error { return writeTUNGSO(f, bufs, offset) }
	}
	e.stk, err = stack.New(stack.Config{
		MTU:      e.cfg.MTU,
		MaxFlows: e.cfg.MaxFlows,
		// Room for a SYN flood: the stack's SYN guard keeps a quarter of
		// these for handshakes in progress and the rest for the ones it
		// evicted, until gVisor has let them go.
		MaxInFlight: min(e.cfg.MaxFlows, 4096),
		HandleTCP:   e.handleTCP,
		Output:      output,
		GSOMaxSize:  gsoMax,
		OutQueueLen: outQueue,
		// Every packet the stack gets comes from our own kernel through the
		// TUN, its TCP checksum either vouched for by the kernel (left
		// partial by a TUN with offloads, vnetPacket) or checked by
		// routeFromTUN; the satellite hop is covered by the AEAD. gVisor
		// checking again would be wasted CPU, or wrong (a partial sum).
		TrustRXChecksums: true,
		BufferMemory:     stackMemory(e.cfg.Memory),
		Logger:           e.log.With("part", "stack"),
	})
	if err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	cleanup = append(cleanup, func() { e.stk.Close() })

	as := make([]*assoc, 0, len(e.cfg.Peers))
	for _, pc := range e.cfg.Peers {
		a, err := e.newAssoc(pc, len(e.cfg.Peers))
		if err != nil {
			return err
		}
		as = append(as, a)
	}
	e.mu.Lock()
	for _, a := range as {
		e.startLocked(a)
	}
	e.mu.Unlock()
	// Associations close before the stack: peers learn at once that our
	// streams are gone, while the UDP socket is still open to tell them.
	cleanup = append(cleanup, e.closeAssocs)
	// Before they close (cleanups run in reverse): their paths are saved.
	cleanup = append(cleanup, e.savePaths)

	e.started = time.Now() // before the control socket can report it
	cleanup = append(cleanup, e.serveControl())
	e.log.Info("endpoint up", "tun", e.cfg.Name, "listen", e.sock.LocalAddr().String(), "mtu", e.cfg.MTU, "peers", len(e.cfg.Peers))
	e.goLoop("tun-reader", e.readTUN)
	e.goLoop("udp-reader", e.readUDP)
	e.goLoop("udp-replies", e.sendReplies)
	e.goLoop("timers", e.timers)
	// From here on Reload may change e.cfg (under e.mu); Run reads it no
	// more.
	e.mu.Lock()
	e.running = true
	e.mu.Unlock()
	close(e.ready)

	<-e.ctx.Done()
	e.log.Info("endpoint stopping")
	// Unblock the readers: closing the TUN and the socket ends their reads,
	// so close those first in the order above, then wait for the loops.
	for i := len(cleanup) - 1; i >= 0; i-- {
		cleanup[i]()
	}
	cleanup = nil
	e.wg.Wait()
	e.log.Info("endpoint stopped")
	return nil
}

// goLoop runs one named pipeline stage until it returns.
func (e *Endpoint) goLoop(name string, f func()) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.log.Debug("stage start", "stage", name)
		f()
		e.log.Debug("stage stop", "stage", name)
	}()
}

// ErrNotRunning is returned by Reload before Run has brought the endpoint
// up, or after it stopped.
var ErrNotRunning = errors.New("endpoint not running")

// Reload applies a new configuration's peer set (SIGHUP). Interface settings
// need a restart; peers that did not change keep their association and flows.
// Everything is checked before anything changes: a reload that fails leaves
// the running configuration as it was.
func (e *Endpoint) Reload(cfg *configs.Config) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.running {
		return ErrNotRunning
	}
	old := e.cfg
	pcs := peerConfigs(cfg)
	if err := e.dev.CheckPeers(pcs); err != nil {
		return fmt.Errorf("reload peers: %w", err)
	}
	// The budget is the running one ([interface] changes need a restart):
	// it must hold the new peers too.
	if err := configs.MemoryHolds(old.Memory, len(cfg.Peers)); err != nil && old.Memory > 0 {
		return fmt.Errorf("reload: interface.memory of the running endpoint (%s) %w, and restart", configs.FormatSize(old.Memory), err)
	}
	// Peers that are new or changed get a new association; build them all
	// first, so a peer the transport refuses stops the reload here.
	var added []*assoc
	keep := map[string]bool{}
	for _, pc := range cfg.Peers {
		if a, ok := e.assocs[pc.Name]; ok && samePeer(a.cfg, pc) {
			keep[pc.Name] = true
			continue
		}
		a, err := e.newAssoc(pc, len(cfg.Peers))
		if err != nil {
			return fmt.Errorf("reload: %w", err)
		}
		added = append(added, a)
	}
	newCfg := *old
	newCfg.Peers = cfg.Peers
	if err := e.net.SetRoutes(allSubnets(&newCfg)); err != nil {
		if rerr := e.net.SetRoutes(allSubnets(old)); rerr != nil {
			e.log.Error("reload: restoring the routes", "err", rerr)
		}
		return fmt.Errorf("reload: %w", err)
	}
	if cfg.Name != old.Name || cfg.Listen != old.Listen || cfg.MTU != old.MTU || cfg.PrivateKeyFile != old.PrivateKeyFile || cfg.Metrics != old.Metrics {
		e.log.Warn("reload: [interface] changes need a restart; applying peer changes only")
	}
	e.checkKeyFile(cfg.PrivateKeyFile)
	// Associations of removed or changed peers close while the peer's
	// secure session still exists, so their close reaches the peer: it
	// resets its side too, and a fresh association on both sides follows
	// if the peer comes back.
	for name, a := range e.assocs {
		if !keep[name] {
			e.log.Info("reload: peer removed or changed", "peer", name)
			a.close()
			delete(e.assocs, name)
			e.announce.Delete(name)
		}
	}
	if err := e.dev.SetPeers(pcs); err != nil {
		// CheckPeers accepted the same set a moment ago.
		return fmt.Errorf("reload peers: %w", err)
	}
	// Every peer kept gets its part of the budget split anew.
	m := splitPeerMemory(old.Memory, len(cfg.Peers))
	for name, a := range e.assocs {
		if keep[name] {
			a.setMemory(m)
		}
	}
	for _, a := range added {
		e.startLocked(a)
	}
	e.cfg = &newCfg
	e.log.Info("reload done", "peers", len(cfg.Peers))
	return nil
}

// checkKeyFile warns when the private key file no longer holds the key
// the endpoint runs with. The key is an [interface] setting, read at start
// only: the endpoint goes on with the old key, and its peers know it by
// the old public key, until it restarts.
func (e *Endpoint) checkKeyFile(path string) {
	running := e.dev.PublicKey()
	k, err := peers.LoadPrivateKeyFile(path)
	switch {
	case err != nil:
		e.log.Warn("reload: cannot read the private key file; the endpoint keeps the key it started with",
			"private_key_file", path, "err", err)
	case k.PublicKey() != running:
		e.log.Warn("reload: the private key file changed; the endpoint keeps the key it started with until restarted",
			"private_key_file", path, "running_public_key", running.String(), "file_public_key", k.PublicKey().String(),
			"hint", "restart the endpoint to use the new key, and give its peers the new public key")
	}
}

// samePeer reports whether a peer's configuration is unchanged in every
// respect its association depends on.
func samePeer(a, b configs.PeerConfig) bool {
	return a.PublicKey == b.PublicKey && samePrefixes(a.Subnets, b.Subnets) && a.Link == b.Link &&
		a.Quic == b.Quic && slices.Equal(a.QuicPorts, b.QuicPorts) && slices.Equal(a.Paths, b.Paths)
}

// Stats returns the endpoint's counters.
func (e *Endpoint) Stats() *Stats { return &e.stats }

func (e *Endpoint) closeAssocs() {
	e.mu.Lock()
	as := e.assocs
	e.assocs = map[string]*assoc{}
	e.running = false
	e.mu.Unlock()
	for _, a := range as {
		a.close()
	}
}

// assocList returns the peers' associations as they are now, for work
// that must not hold e.mu while it visits them.
func (e *Endpoint) assocList() []*assoc {
	e.mu.Lock()
	defer e.mu.Unlock()
	as := make([]*assoc, 0, len(e.assocs))
	for _, a := range e.assocs {
		as = append(as, a)
	}
	return as
}

// assocFor returns the association of the peer owning dst.
func (e *Endpoint) assocFor(dst netip.Addr) *assoc {
	p, ok := e.dev.Lookup(dst)
	if !ok {
		return nil
	}
	e.mu.Lock()
	a := e.assocs[p.Name()]
	e.mu.Unlock()
	return a
}

func (e *Endpoint) assocByName(name string) *assoc {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.assocs[name]
}

// handshakePayload is called by peers with a peer's lock held, so it reads
// only the announce map and the association's atomics, never e.mu.
func (e *Endpoint) handshakePayload(peer string) []byte {
	if v, ok := e.announce.Load(peer); ok {
		return v.(*assoc).payload()
	}
	return assocParams{version: wireVersion, instance: e.instance}.marshal()
}

// timers drives the handshake and rekey timers, and passes the measured
// uplink rates on to peers once a second.
func (e *Endpoint) timers() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for i := 1; ; i++ {
		select {
		case <-e.ctx.Done():
			return
		case <-t.C:
		}
		for _, d := range e.dev.Tick() {
			e.sendUDP(d.Data, d.To)
		}
		if i%10 == 0 {
			e.measureUplinks()
		}
		if i%int(pathSaveEvery/(100*time.Millisecond)) == 0 {
			e.savePaths()
		}
	}
}

func peerConfigs(cfg *configs.Config) []peers.PeerConfig {
	out := make([]peers.PeerConfig, 0, len(cfg.Peers))
	for _, p := range cfg.Peers {
		out = append(out, peers.PeerConfig{
			Name:      p.Name,
			PublicKey: peers.Key(p.PublicKey),
			Endpoint:  p.Endpoint,
			Subnets:   p.Subnets,
			Up:        p.Link.Up,
		})
	}
	return out
}

func allSubnets(cfg *configs.Config) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range cfg.Peers {
		out = append(out, p.Subnets...)
	}
	return out
}

func samePrefixes(a, b []netip.Prefix) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

var errClosed = errors.New("endpoint closed")
