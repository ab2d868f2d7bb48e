package scps

// This file owns the association's paths: one association, one key and
// one set of streams over several links to the peer (docs/multipath.md).
// The layer below numbers the paths (SetPath; path 0 exists from the
// start) and passes the number with every packet, in (ReceiveOn) and out
// (SendOn); the association knows nothing of their addresses or sockets.
// With one path nothing here runs: no probes, no other field, the packets
// are those of a single-path association.
//
// With several paths the association judges each one by what it sends on
// it:
//   - a path probe (a PING alone) goes on every path that has carried
//     nothing ack-eliciting for pathProbeInterval, so each path is tested
//     whether it carries data or not;
//   - a path is down when an ack-eliciting packet sent on it has gone
//     unacknowledged for downAfter (twice its smoothed RTT, its RTT
//     plus four deviations, or minPathDown, whichever is longest; while
//     its RTT is neither measured nor told, at least untoldDown) and none
//     of its packets was acknowledged for its smoothed RTT (downAt), and up
//     again when a packet sent on it after that is acknowledged; the
//     acknowledgement may come back on any path, so a path's RTT is its
//     way out plus the way back of whichever path carried the ACK;
//   - all packets go on one path, the data path: on a side that was told
//     its paths, the first working primary path, else the first working
//     backup; on a side that only learned them from the peer's packets,
//     the working path the peer last sent other than probes on (it follows
//     the peer's choice), and one its probes call the peer's backup
//     (PATH_ROLE) only while the peer moved there or none of its
//     primaries works here (learnedBackupOK). When the data path changes
//     because it went down, what was in flight on it is lost to the
//     failover (no window change) and repaired at once on the new one;
//   - in outage mode (every path silent) the outage probes go round the
//     paths, so whichever link returns first is found;
//   - a learned path that is down and has not been heard for pathForget is
//     retired (a roaming peer's old address): no more probes.
// Congestion control, pacing and loss detection are still the
// association's, shared by the paths: bonding will give each path its own.

import (
	"fmt"
	"sort"
	"time"

	"scpsvpn/scps/cc"
	"scpsvpn/scps/internal/ackhandler"
	"scpsvpn/scps/internal/wire"
)

// MaxPaths bounds an association's paths (configs.MaxPaths agrees).
const MaxPaths = 8

const (
	// pathProbeInterval: a path that carried nothing ack-eliciting this
	// long gets a probe. Ten PINGs a second per path, some 600 bytes/s
	// with the seal, bound how long a dead path goes unnoticed.
	pathProbeInterval = 100 * time.Millisecond
	// minPathDown is the least silence that takes a path down: above
	// scheduling noise and a delayed ACK.
	minPathDown = 300 * time.Millisecond
	// minUntoldDown and maxUntoldDown bound the silence that takes down
	// a path whose RTT is neither measured nor told (untoldDown): its
	// initial RTT is a guess, often another link's. A learned GEO beside
	// a cellular link, guessed at the cellular's 60 ms, went down 300 ms
	// after it was learned, before its first check could come back, and
	// carried little in its first seconds.
	minUntoldDown = time.Second
	maxUntoldDown = 3 * time.Second
	// pathForget retires a learned path that is down and silent.
	pathForget = 3 * time.Second
	// pathChecks bounds the packets per path whose acknowledgement is
	// awaited for the path's liveness and RTT.
	pathChecks = 64
	// pathCheckGap is the least time between two awaited packets of a
	// path, and pathCheckSpan how many of its RTTs the awaited ones span
	// at least (the gap grows with the RTT): the ring must hold a
	// packet until its acknowledgement comes. With a fixed 5 ms gap, 64
	// spanned 320 ms, less than a GEO's RTT beside a LEO (the GEO's way
	// out, the LEO's back, and the modem's queue): a GEO sending at its
	// rate dropped every awaited packet before its ACK came, its RTT was
	// not measured (its down time kept to an empty queue's), and its
	// loss and liveness were judged by the few packets of its lulls.
	pathCheckGap  = 5 * time.Millisecond
	pathCheckSpan = 4
	// maxPathAckRanges bounds the ranges of one ACK frame that the paths'
	// awaited packets are looked up in: a receiver with several paths
	// reports every arrival since its last ACK, hundreds of ranges after
	// a batch (ackhandler's maxUnsentRanges and more).
	maxPathAckRanges = 1024
)

// PathOptions is what the layer below tells the association of a path.
type PathOptions struct {
	Name string // for logs and PathStats
	// Backup: the path carries data only while no primary path works.
	Backup bool
	// Learned: the path was learned from the peer's packets rather than
	// configured here; a side whose paths are all learned sends on the
	// path the peer uses.
	Learned bool
	// InitialRTT is the path's RTT until measured; 0: Config.InitialRTT.
	InitialRTT time.Duration
	// UntoldRTT: InitialRTT is a guess, not this path's own (its
	// [peer.path.link] gives no rtt), so its first silence is judged with
	// patience (untoldDown). A learned path's RTT is never told.
	UntoldRTT bool
	// SendRate is the bit/s of the path's forward link, which its pacer
	// never exceeds; 0: unknown (its controller finds it). Path 0 takes
	// Config.SendRate instead.
	SendRate int64
	// Resume is what an earlier association saved of this path
	// (PathStateOf), for careful resume on it as Config.Resume is for
	// path 0; zero: none. Path 0 takes Config.Resume instead.
	Resume cc.Resume
}

// PathStats is a snapshot of one path.
type PathStats struct {
	Index   int
	Name    string
	Backup  bool // configured so, or, learned, the peer's PATH_ROLE says so
	Learned bool
	Up      bool // its packets are acknowledged
	Active  bool // it carries the data now
	Retired bool // a learned path given up (down and silent)

	SRTT   time.Duration // smoothed RTT of packets sent on it (0: none measured)
	MinRTT time.Duration

	PacketsSent     uint64
	BytesSent       uint64
	DataPacketsSent uint64 // packets that carried stream data or datagrams
	DataBytesSent   uint64 // their bytes
	ProbesSent      uint64 // path probes
	PacketsReceived uint64
	BytesReceived   uint64
	// Loss is the share of the packets awaited on the path (every
	// ack-eliciting one, at most one each 5 ms) whose acknowledgement never
	// came while a later one's did: its loss rate, both ways of the path's
	// round trip. Checked and Lost are the counts behind it.
	Loss          float64
	Checked, Lost uint64
	Downs         uint64 // times it went down
	Failovers     uint64 // times the data left it because it went down
}

// pathCheck is an ack-eliciting packet sent on a path, awaiting its
// acknowledgement.
type pathCheck struct {
	pn uint64
	at time.Duration
}

type path struct {
	opts    PathOptions
	inUse   bool
	up      bool
	retired bool
	rtt     *cc.RTTStats

	checks     [pathChecks]pathCheck // a ring, oldest at head
	head, n    int
	lastCheck  time.Duration // when the newest check was sent
	lastElicit time.Duration // when an ack-eliciting packet last went on it
	lastHeard  time.Duration // when a packet last arrived on it
	lastTraffc time.Duration // when a packet other than a probe last arrived on it
	lastOut    time.Duration // when we last sent on it a packet other than a probe or its answer
	downSince  time.Duration // when it last went down
	// peerBackup: a learned path the peer's probes say is its backup
	// (PATH_ROLE).
	peerBackup bool
	share      time.Duration // its data's virtual clock (bond.go, bondCharge)
	stats      PathStats
	// light is the latest packet of a light stream's data sent on it,
	// watched for a silence (latency.go, resendLight).
	light lightWatch
}

// pathSet is the association's paths.
type pathSet struct {
	p         [MaxPaths]path
	data      int    // the data path
	probeNext int    // the next path an outage probe goes on
	ackNext   int    // the path a told side's last spread packet without data went on (bond.go)
	acksSent  uint64 // packets without data sent while several paths may carry data
	sendOn    int    // the path of the packet being built
	// answerOwed: paths a probe came on, off the data path, not yet
	// answered there (latency.go)
	answerOwed uint16
	// quiet, quietUntil, quietNext: the lowest-delay path holds its
	// bulk until quietUntil, a peer's new stream just opened; the next
	// quiet may begin at quietNext (latency.go).
	quiet                 int
	quietUntil, quietNext time.Duration
	// lightNext: the packet being built goes where the latency
	// scheduler put it, a light stream's data first (latency.go).
	lightNext bool
	// ackRanges is onPathAck's scratch: the ranges of one ACK frame.
	ackRanges []wire.AckRange
	// backupAt: on a side that only learned its paths, with none of the
	// peer's primaries up, when its backups may carry data though the
	// peer sends nothing on them (learnedBackupOK); 0: no such wait.
	backupAt time.Duration
}

// init makes path 0, the one every association has.
func (ps *pathSet) init(cfg Config, now time.Duration) {
	ps.set(0, PathOptions{}, cfg, now)
}

func (ps *pathSet) set(i int, opts PathOptions, cfg Config, now time.Duration) {
	if opts.InitialRTT <= 0 {
		opts.InitialRTT = cfg.InitialRTT
	}
	ps.p[i] = path{opts: opts, inUse: true, up: true, rtt: cc.NewRTTStats(opts.InitialRTT), lastHeard: now}
	ps.p[i].stats.Index, ps.p[i].stats.Name = i, opts.Name
	ps.p[i].stats.Backup, ps.p[i].stats.Learned = opts.Backup, opts.Learned
}

// setMultipath tells the receiving side whether packets may come over
// several paths.
func (a *Association) setMultipath() {
	a.ack.SetMultipath(a.paths.multi())
	a.ackBudget.SetMultipath(a.paths.multi())
}

// inUse counts the paths set, retired or not.
func (ps *pathSet) inUse() (n int) {
	for i := range ps.p {
		if ps.p[i].inUse {
			n++
		}
	}
	return n
}

// multi reports whether more than one path is in use: only then do the
// paths' probes and judgements run.
func (ps *pathSet) multi() bool {
	n := 0
	for i := range ps.p {
		if ps.p[i].inUse && !ps.p[i].retired {
			n++
		}
	}
	return n > 1
}

// SetPath makes path i (0 <= i < MaxPaths) a path to the peer, or starts
// it afresh: a new path starts up, its RTT unknown. Path 0 exists from
// the start; the layer below reuses a number for a new path freely.
func (a *Association) SetPath(i int, opts PathOptions) error {
	if i < 0 || i >= MaxPaths {
		return fmt.Errorf("scps: path %d: use 0..%d", i, MaxPaths-1)
	}
	if i > 0 {
		// A path of its own: a fresh controller, pacer and RTT.
		pc := ackhandler.PathConfig{SendRate: opts.SendRate, InitialRTT: opts.InitialRTT}
		if opts.Resume.Saved.Rate > 0 {
			pc.Resume = &opts.Resume
		}
		if err := a.sent.SetPath(i, pc, a.now); err != nil {
			return fmt.Errorf("scps: path %d: %w", i, err)
		}
	}
	a.paths.set(i, opts, a.cfg, a.now)
	a.setMultipath()
	a.choosePath()
	return nil
}

// RemovePath stops using path i (not path 0, which always exists).
func (a *Association) RemovePath(i int) {
	if i <= 0 || i >= MaxPaths {
		return
	}
	a.paths.p[i] = path{}
	a.sent.LosePath(a.now, i)
	a.setMultipath()
	a.choosePath()
}

// Paths returns a snapshot of the paths in use.
func (a *Association) Paths() []PathStats {
	var out []PathStats
	for i := range a.paths.p {
		p := &a.paths.p[i]
		if !p.inUse {
			continue
		}
		s := p.stats
		s.Up, s.Retired, s.Active = p.up, p.retired, i == a.paths.data
		if p.rtt.Samples() > 0 {
			s.SRTT, s.MinRTT = p.rtt.Smoothed(), p.rtt.Min()
		}
		if s.Checked > 0 {
			s.Loss = float64(s.Lost) / float64(s.Checked)
		}
		out = append(out, s)
	}
	return out
}

// ReceiveArrived is ReceiveOn for a packet the host took in at arrived,
// before now (a kernel receive timestamp): the packet's timing (RTT
// samples, the delay its ACK reports, the arrival rate of trains) counts
// from arrived, so a host that holds packets before handing them over
// does not look like a queue on the path. A zero arrived is now.
func (a *Association) ReceiveArrived(now, arrived time.Time, i int, pn uint64, pkt []byte) error {
	a.rxArrived = arrived
	defer func() { a.rxArrived = time.Time{} }()
	return a.ReceiveOn(now, i, pn, pkt)
}

// ReceiveOn is Receive for a packet that arrived on path i; a path not
// set (SetPath) counts as path 0.
func (a *Association) ReceiveOn(now time.Time, i int, pn uint64, pkt []byte) error {
	if i < 0 || i >= MaxPaths || !a.paths.p[i].inUse {
		i = 0
	}
	before := a.stats.PacketsReceived
	a.rxPath = i
	err := a.Receive(now, pn, pkt)
	a.rxPath = 0
	if a.stats.PacketsReceived == before {
		return err // not accepted: says nothing of the path
	}
	p := &a.paths.p[i]
	p.stats.PacketsReceived++
	p.stats.BytesReceived += uint64(len(pkt))
	p.lastHeard = a.now
	if p.retired {
		p.retired, p.up = false, false // heard again: probe it anew
	}
	if isPathProbe(pkt) && i != a.paths.data {
		a.paths.answerOwed |= 1 << i
	}
	if !isPathProbe(pkt) && !isProbeAnswer(pkt) {
		p.lastTraffc = a.now
		if a.paths.learnedOnly() {
			a.choosePath()
		}
	} else if p.peerBackup && !a.paths.p[a.paths.data].up && a.paths.learnedOnly() {
		// The peer's probes on its backup while our data path is down:
		// may the backup carry the data now (learnedBackupOK)?
		a.choosePath()
	}
	return err
}

// isPathProbe reports whether pkt is a probe: PINGs, padding and
// PATH_ROLE frames only.
func isPathProbe(pkt []byte) bool {
	for p := 0; p < len(pkt); {
		switch pkt[p] {
		case wire.FramePing, wire.FramePadding:
			p++
		case wire.FramePathRole:
			var f wire.Frame
			n, err := wire.ParseFrame(pkt[p:], &f)
			if err != nil {
				return false
			}
			p += n
		default:
			return false
		}
	}
	return len(pkt) > 0
}

// isProbeAnswer reports whether pkt answers a probe (latency.go): ACK
// frames and padding alone, with padding. Like a probe, it is not the
// peer's traffic: a backup it came on carries no data for it.
func isProbeAnswer(pkt []byte) bool {
	var f wire.Frame
	pad := false
	for p := 0; p < len(pkt); {
		n, err := wire.ParseFrame(pkt[p:], &f)
		if err != nil || n <= 0 {
			return false
		}
		p += n
		switch f.Type {
		case wire.FramePadding:
			pad = true
		case wire.FrameAck:
		default:
			return false
		}
	}
	return pad
}

// SendOn is Send that also says which path the packet goes on.
func (a *Association) SendOn(now time.Time, buf []byte) (n int, pn uint64, path int) {
	a.setNow(now)
	if a.state != stateOpen || !a.paths.multi() {
		a.sent.Use(a.paths.data)
		n, pn = a.Send(now, buf)
		if n > 0 {
			a.paths.onSent(a, a.paths.data, pn, n, a.lastSent)
		}
		return n, pn, a.paths.data
	}
	a.checkPaths()
	if n, pn, path, ok := a.sendLightCopy(now, buf); ok {
		return n, pn, path
	}
	if a.outage.active {
		// Outage probes go round the paths.
		if !a.outage.probeDue(a.now) {
			return 0, 0, 0
		}
		path = a.paths.nextProbePath()
	} else if i, ok := a.paths.probeDue(a.now); ok {
		a.sent.Use(i)
		n, pn = a.sendPathProbe(buf, i)
		if n > 0 {
			a.paths.p[i].stats.ProbesSent++
			a.paths.onSent(a, i, pn, n, a.lastSent)
		}
		return n, pn, i
	} else if i, ok := a.paths.owedAnswer(); ok {
		a.sent.Use(i)
		pn = a.sent.NextPN()
		if n = a.sendProbeAnswer(buf); n > 0 {
			a.paths.onSent(a, i, pn, n, a.lastSent)
			return n, pn, i
		}
		path = a.sendPath(true)
	} else {
		path = a.sendPath(true)
	}
	a.sent.Use(path)
	n, pn = a.Send(now, buf)
	if n > 0 && !a.lastSent.carried {
		a.paths.acksSent++
	}
	if n > 0 {
		a.paths.onSent(a, path, pn, n, a.lastSent)
		a.paths.p[path].lastOut = a.now
		if a.lastSent.carried {
			a.bondCharge(path, n)
			if a.paths.lightNext && a.sent.AnyStream(pn, a.streams.Light) {
				w := &a.paths.p[path].light
				w.sent(pn, a.now, w.on && a.sent.Outstanding(w.pn))
				w.copy = true
			}
		}
	}
	return n, pn, path
}

// sentKind is what Send's last packet was, for the path's counters.
type sentKind struct {
	eliciting bool // it awaits an acknowledgement
	carried   bool // it carried stream data or datagrams
}

// onSent books packet pn of n bytes on path i.
func (ps *pathSet) onSent(a *Association, i int, pn uint64, n int, k sentKind) {
	p := &ps.p[i]
	p.stats.PacketsSent++
	p.stats.BytesSent += uint64(n)
	if k.carried {
		p.stats.DataPacketsSent++
		p.stats.DataBytesSent += uint64(n)
	}
	if !k.eliciting {
		return
	}
	p.lastElicit = a.now
	if a.now-p.lastCheck < max(pathCheckGap, pathCheckSpan*p.rtt.Smoothed()/pathChecks) && p.n > 0 {
		return
	}
	if p.n == pathChecks {
		// Full: the oldest goes (one still older than the path's
		// patience is there to take it down meanwhile).
		p.head, p.n = (p.head+1)%pathChecks, p.n-1
	}
	p.checks[(p.head+p.n)%pathChecks] = pathCheck{pn: pn, at: a.now}
	p.n++
	p.lastCheck = a.now
}

// sendPathProbe builds a probe of path i: a PING, not counted in flight
// (it is no data and must not hold the window), not subject to the pacer.
// On a backup path this side was told of, toward a peer that takes it
// (Config.PathRoles), a PATH_ROLE frame follows: the path is a backup,
// which a peer that only learns its paths cannot know otherwise (it takes
// a path for a primary until told). Nothing of it is repaired: the next
// probe says it again. A primary's probes stay a PING alone: a path's
// role changes only with a new association (a reload that changes the
// paths begins one).
func (a *Association) sendPathProbe(buf []byte, i int) (int, uint64) {
	pn := a.sent.NextPN()
	if a.limit(buf, pn) < 64 {
		return 0, 0
	}
	firstFrame := a.sent.FrameEnd()
	b := append(buf[:0], wire.FramePing)
	if o := &a.paths.p[i].opts; a.cfg.PathRoles && !o.Learned && o.Backup {
		b = wire.AppendPathRole(b, true)
	}
	a.sent.AddFrame().Kind = ackhandler.KindPing
	// Not ack-eliciting to the sent-packet history: a probe of a dead
	// path must not hold the probe timeout or outage detection of the
	// association; its acknowledgement is awaited by its path alone.
	a.sent.OnPacketSent(a.now, ackhandler.SentPacket{SentAt: a.now, FirstFrame: firstFrame, NFrames: uint16(a.sent.FrameEnd() - firstFrame), Size: int32(len(b))})
	a.stats.PacketsSent++
	a.stats.BytesSent += uint64(len(b))
	a.lastSent = sentKind{eliciting: true}
	return len(b), pn
}

// probeDue returns a path that is due a probe: one in use, not retired,
// that has carried nothing ack-eliciting for pathProbeInterval.
func (ps *pathSet) probeDue(now time.Duration) (int, bool) {
	for i := range ps.p {
		p := &ps.p[i]
		if p.inUse && !p.retired && now-p.lastElicit >= pathProbeInterval {
			return i, true
		}
	}
	return 0, false
}

// probeDeadline is when the next path probe is due (0: none).
func (ps *pathSet) probeDeadline() time.Duration {
	var d time.Duration
	for i := range ps.p {
		p := &ps.p[i]
		if p.inUse && !p.retired {
			if t := p.lastElicit + pathProbeInterval; d == 0 || t < d {
				d = t
			}
		}
	}
	return d
}

// nextProbePath returns the path for the next outage probe, going round.
func (ps *pathSet) nextProbePath() int {
	for range MaxPaths {
		i := ps.probeNext % MaxPaths
		ps.probeNext++
		if ps.p[i].inUse && !ps.p[i].retired {
			return i
		}
	}
	return ps.data
}

// downAfter is how long a packet on path i may go unacknowledged before
// the path is down: by its RTT, and while that is neither measured nor
// told, no sooner than untoldDown.
func (ps *pathSet) downAfter(i int) time.Duration {
	p := &ps.p[i]
	srtt := p.rtt.Smoothed()
	d := max(2*srtt, srtt+4*p.rtt.Var(), minPathDown)
	if p.rtt.Samples() == 0 && (p.opts.UntoldRTT || p.opts.Learned) {
		d = max(d, ps.untoldDown())
	}
	return d
}

// downAt is when path i, up with packets awaited, goes down: when its
// oldest awaited packet went unacknowledged for downAfter, and no packet
// of it was acknowledged (acked: when one last was) for its SRTT. A path
// whose packets are still acknowledged delivers: an untold GEO's Hybla
// slow start (2^24 packets per packet acknowledged) filled the modem's
// queue within a round trip, the packets behind it waited twice the SRTT
// measured before, and the path went down again and again while it
// carried data, on a side that learned its paths onto the backup; after
// the tail of such a burst was lost, the path's probes are answered
// within that SRTT. A dead path's last acknowledgement is at least that
// old by the time its oldest awaited packet has waited downAfter, unless
// a queue delayed it, so a cut is found as soon as before.
func (ps *pathSet) downAt(i int, acked time.Duration) time.Duration {
	p := &ps.p[i]
	return max(p.checks[p.head].at+ps.downAfter(i), acked+p.rtt.Smoothed())
}

// untoldDown is the least silence that takes down a path whose RTT is
// neither measured nor told: twice the longest SRTT measured on the
// other paths (the new one may well be as slow as the slowest, and its
// first check's answer may wait behind that one's queue), at least
// minUntoldDown (a GEO's 600 ms and a modem's queue) and at most
// maxUntoldDown (a dead path is still found in a few seconds).
func (ps *pathSet) untoldDown() time.Duration {
	var longest time.Duration
	for i := range ps.p {
		if q := &ps.p[i]; q.inUse && !q.retired && q.rtt.Samples() > 0 {
			longest = max(longest, q.rtt.Smoothed())
		}
	}
	return min(max(2*longest, minUntoldDown), maxUntoldDown)
}

// onAck marks the paths' awaited packets that f acknowledges: the newest
// acknowledged one gives an RTT sample and brings its path up; older ones
// of the same path are no longer awaited (lost or acknowledged).
func (a *Association) onPathAck(f *wire.Ack) {
	if !a.paths.multi() && a.paths.p[0].n == 0 {
		return
	}
	rs := a.paths.ackRanges[:0]
	it := f.Iter()
	for len(rs) < maxPathAckRanges {
		r, ok := it.Next()
		if !ok {
			break
		}
		rs = append(rs, r)
	}
	a.paths.ackRanges = rs
	if len(rs) == 0 {
		return
	}
	lowest := rs[len(rs)-1].Smallest
	acked := func(pn uint64) bool {
		// rs descends: the first range whose smallest is at or below
		// pn is the only one that may hold it.
		i := sort.Search(len(rs), func(i int) bool { return rs[i].Smallest <= pn })
		return i < len(rs) && pn <= rs[i].Largest
	}
	for i := range a.paths.p {
		p := &a.paths.p[i]
		newest := -1
		for k := range p.n {
			if acked(p.checks[(p.head+k)%pathChecks].pn) {
				newest = k
			}
		}
		if newest < 0 {
			continue
		}
		// One older is lost if the frame reaches below it and leaves it
		// out; a frame that stops above it says nothing of it.
		checked := 1
		for k := range newest {
			if pn := p.checks[(p.head+k)%pathChecks].pn; pn >= lowest {
				checked++
				if !acked(pn) {
					p.stats.Lost++
				}
			}
		}
		p.stats.Checked += uint64(checked)
		c := p.checks[(p.head+newest)%pathChecks]
		p.head, p.n = (p.head+newest+1)%pathChecks, p.n-newest-1
		p.rtt.Update(a.now-c.at, 0)
		if !p.up {
			p.up = true
			a.logPath(i, "path up")
			a.choosePath()
		}
	}
}

// checkPaths takes down the paths whose awaited packets went
// unacknowledged too long, retires learned paths long down and silent,
// and moves the data off a path that went down.
func (a *Association) checkPaths() {
	changed := false
	for i := range a.paths.p {
		p := &a.paths.p[i]
		if !p.inUse || p.retired {
			continue
		}
		if p.up && p.n > 0 && a.now >= a.paths.downAt(i, a.sent.PathAckedAt(i)) {
			a.pathDown(i)
			changed = true
		}
		if !p.up && p.opts.Learned && a.now-p.lastHeard >= pathForget && i != a.paths.data {
			p.retired = true
			changed = true
		}
	}
	if at := a.paths.backupAt; at > 0 && a.now >= at {
		changed = true // the peer's backups may carry data now
	}
	if changed {
		a.choosePath()
	}
}

// pathDown takes path i down: its awaited packets went unacknowledged.
func (a *Association) pathDown(i int) {
	p := &a.paths.p[i]
	p.up = false
	p.downSince = a.now
	p.stats.Downs++
	p.n = 0 // what is awaited now is sent from here on
	// What is in flight on it is lost to its failure (no window change),
	// repaired on the paths left.
	a.sent.LosePath(a.now, i)
	a.logPath(i, "path down")
}

// pathDeadline is when checkPaths or a path probe next has work (0:
// none), while several paths are in use.
func (a *Association) pathDeadline() time.Duration {
	if !a.paths.multi() {
		return 0
	}
	d := a.paths.probeDeadline()
	for i := range a.paths.p {
		p := &a.paths.p[i]
		if p.inUse && !p.retired && p.up && p.n > 0 {
			if t := a.paths.downAt(i, a.sent.PathAckedAt(i)); d == 0 || t < d {
				d = t
			}
		}
	}
	if t := a.paths.backupAt; t > 0 && (d == 0 || t < d) {
		d = t
	}
	return d
}

// learnedOnly reports whether every path in use was learned.
func (ps *pathSet) learnedOnly() bool {
	for i := range ps.p {
		if ps.p[i].inUse && !ps.p[i].opts.Learned {
			return false
		}
	}
	return true
}

// choosePath picks the data path (see the file's comment) and fails over
// when the old one went down.
func (a *Association) choosePath() {
	ps := &a.paths
	best := -1
	learned := ps.learnedOnly()
	ps.backupAt = 0
	if d := &ps.p[ps.data]; learned && d.inUse && d.up && !d.retired && d.lastTraffc > 0 && a.now-d.lastTraffc <= bondRecent && ps.learnedBackupOK(ps.data, a.now) {
		// Bonding: the peer still sends on it (bond.go).
		best = ps.data
	} else if learned {
		for i := range ps.p {
			p := &ps.p[i]
			if p.inUse && !p.retired && p.up && ps.learnedBackupOK(i, a.now) && (best < 0 || p.lastTraffc > ps.p[best].lastTraffc) {
				best = i
			}
		}
	} else {
		for i := range ps.p {
			p := &ps.p[i]
			if p.inUse && !p.retired && p.up && (best < 0 || p.rank() < ps.p[best].rank()) {
				best = i
			}
		}
	}
	old := ps.data
	if best < 0 {
		// No path works: go on over the one the peer was heard on last,
		// if a probe interval after the old one (its packets prove the
		// way back at least; its probes' answers bring it up; paths
		// heard alike do not swap the data to and fro), else stay
		// (outage mode takes over if the peer falls silent), unless the
		// old one is gone.
		for i := range ps.p {
			p := &ps.p[i]
			if p.inUse && !p.retired && p.lastHeard > ps.p[old].lastHeard+pathProbeInterval && (!learned || ps.learnedBackupOK(i, a.now)) && (best < 0 || p.lastHeard > ps.p[best].lastHeard) {
				best = i
			}
		}
		if best < 0 && ps.p[old].inUse {
			return
		}
		if best < 0 {
			best = 0
		}
	}
	if best == old {
		return
	}
	ps.data = best
	a.logPath(best, "data path")
	if ps.p[old].inUse && !ps.p[old].up && a.state == stateOpen && !a.outage.active {
		// Failover: what was in flight went on the dead path. Repair it
		// on the new one now, as an outage does (no window change), and
		// let the peer's first answer on the new path count as a fresh
		// start for the silence hold.
		ps.p[old].stats.Failovers++
		a.sent.LosePath(a.now, old)
		a.sent.OnResume()
		a.outage.onFailover(a.now)
	}
}

// learnedBackupOK reports whether path i may carry data on a side that
// only learned its paths: any path the peer did not say is its backup
// (PATH_ROLE); a backup of the peer's only while no primary of the
// peer's is up here and one of these holds:
//   - the peer's latest traffic came on it (the peer, told its paths,
//     found no primary working and moved on to it);
//   - none of the peer's packets came on any primary for learnedSilence
//     while they (probes at least) still came on it: the primary is
//     silent both ways, as a cut link is, here before the peer's traffic
//     says so;
//   - none of the primaries has been up here for learnedBackupWait: the
//     one failure only this side sees, the primary's way from here dead
//     while the peer's packets still come on it, this side's answers on
//     the backup acknowledge them and the peer keeps its primary.
//
// A primary that looks down here while the peer's packets still come on
// it may well deliver what this side sends, late (its way from here
// stalls): before the peer said which path is its backup, such a side
// sent on the backup whenever the primary looked down here, and a GEO
// whose modem held its packets for half a second put a metered cellular
// backup's megabyte on the user's bill (TestLearnedBackupPrimaryStall).
// It sets ps.backupAt when the wait is on.
func (ps *pathSet) learnedBackupOK(i int, now time.Duration) bool {
	p := &ps.p[i]
	if !p.peerBackup {
		return true
	}
	var since, wait, heard, traffic time.Duration
	for j := range ps.p {
		q := &ps.p[j]
		if !q.inUse || q.peerBackup {
			continue
		}
		if q.up && !q.retired {
			return false
		}
		since, wait = max(since, q.downSince), max(wait, ps.downAfter(j))
		heard, traffic = max(heard, q.lastHeard), max(traffic, q.lastTraffc)
	}
	if p.lastTraffc > 0 && now-p.lastTraffc <= bondRecent && p.lastTraffc >= traffic {
		return true
	}
	if now-heard >= learnedSilence && now-p.lastHeard < learnedSilence {
		return true
	}
	at := since + min(max(wait, minLearnedBackupWait), maxLearnedBackupWait)
	if now >= at {
		return true
	}
	if now-heard < learnedSilence {
		at = min(at, heard+learnedSilence)
	}
	if ps.backupAt == 0 || at < ps.backupAt {
		ps.backupAt = at
	}
	return false
}

// learnedSilence: a primary of the peer's that brought nothing for this
// long while its backup brought the peer's packets is silent both ways
// (learnedBackupOK): two of the peer's probe intervals, so one probe
// lost does not make it so.
const learnedSilence = 2 * pathProbeInterval

// minLearnedBackupWait and maxLearnedBackupWait bound how long none of
// the peer's primaries must have been up at a side that only learned its
// paths before the peer's backup carries data there unasked
// (learnedBackupOK): as long again as the primary's silence took it
// down (downAfter), at least 2 s: a GEO whose way from here stalls for
// 1.2 s (its modem's scheduler) is down here for 1.7 s
// (TestLearnedBackupPrimaryStall), and a way from here that died moves to
// the backup that much later than a cut link (TestLearnedBackupOneWay).
const (
	minLearnedBackupWait = 2 * time.Second
	maxLearnedBackupWait = 3 * time.Second
)

// onPathRole takes a PATH_ROLE frame: the path the packet came on is the
// peer's backup, or a primary. Only a learned path takes it (a path this
// side was told of keeps its own role).
func (a *Association) onPathRole(backup bool) {
	i := a.rxPath
	p := &a.paths.p[i]
	if !p.inUse || !p.opts.Learned || p.peerBackup == backup {
		return
	}
	p.peerBackup, p.stats.Backup = backup, backup
	if backup {
		a.logPath(i, "the peer's backup")
	} else {
		a.logPath(i, "the peer's primary")
	}
	a.choosePath()
}

// SetPathLogger sets the function told of each path's changes (up, down,
// carrying the data); it is called with the association's lock held.
func (a *Association) SetPathLogger(f func(i int, name, what string)) { a.pathLog = f }

func (a *Association) logPath(i int, what string) {
	if a.pathLog != nil {
		a.pathLog(i, a.paths.p[i].opts.Name, what)
	}
}
