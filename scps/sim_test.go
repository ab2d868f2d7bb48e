package scps

// This file owns the deterministic test harness: a simulated link between
// two Associations driven event by event under a virtual clock (no
// sleeping), with per-direction rate, delay, a drop-tail queue, random and
// burst loss, duplication and reordering, plus an application model that
// writes patterned bytes on many streams and checks that every byte
// arrives exactly once and in order.

import (
	"cmp"
	"container/heap"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var simEpoch = time.Unix(1_700_000_000, 0)

// linkParams describes one direction of the simulated link.
type linkParams struct {
	Rate       float64       // bit/s; 0 = unlimited
	Delay      time.Duration // one-way propagation delay
	QueueBytes int           // drop-tail limit of the bottleneck queue; 0 = unlimited
	Loss       float64       // random loss probability
	// Burst loss (Gilbert-Elliott): enter the bad state with BurstEnter
	// per packet, leave with BurstLeave; every packet in it is lost.
	BurstEnter, BurstLeave float64
	Dup                    float64       // duplication probability
	Reorder                float64       // probability of an extra delay
	ReorderDelay           time.Duration // the extra delay
	Overhead               int           // bytes counted per packet for the rate
	Down                   bool          // drop everything
	// CutEvery, CutFor: an outage of CutFor every CutEvery (the first
	// at CutEvery) as linkemu runs one: a packet that enters the link,
	// leaves its queue or arrives during it is lost, so a cut also
	// takes what was queued and on the way when it began.
	CutEvery, CutFor time.Duration
	// Jitter adds a uniform random delay in [0, Jitter) to each packet
	// after the bottleneck, keeping the order (a host's processing delay:
	// TUN, socket queues, scheduling), so it reorders nothing.
	Jitter time.Duration
	// StallEvery and StallFor: the receiving host stalls for StallFor
	// every StallEvery (a loaded machine's scheduling): packets that
	// arrive meanwhile are handed over together when it ends, with the
	// time each arrived (a kernel receive timestamp) unless
	// StallUntimed.
	StallEvery, StallFor time.Duration
	StallUntimed         bool
	// InStallEvery and InStallFor: the link's near end (a userspace
	// emulator, a modem's scheduler) stalls for InStallFor every
	// InStallEvery: the link idles, and the packets that came meanwhile
	// enter it together when the stall ends, queueing behind each other
	// at the rate (a queue of the stall's length, not of the sender's
	// making).
	InStallEvery, InStallFor time.Duration
	// SendStallEvery and SendStallFor: the sending host of this
	// direction stalls for SendStallFor every SendStallEvery (a loaded
	// machine where the endpoint's timer wakes late): it sends nothing
	// and its timers fire at the stall's end. Give the other direction
	// the same StallEvery and StallFor for a host that reads nothing
	// meanwhile either (stallEnd places both stalls alike).
	SendStallEvery, SendStallFor time.Duration
	// HoldFrom and HoldUntil: the link's near end holds what comes to
	// it from HoldFrom until HoldUntil, once (a modem's scheduler that
	// stalls a while), and lets it in then, as InStallEvery does.
	HoldFrom, HoldUntil time.Duration
	// ReleaseEvery: the link's far end lets packets out only every
	// ReleaseEvery (a userspace emulator whose writer wakes late and
	// writes all that fell due in one batch, a modem's frames): those
	// due meanwhile arrive together at the next release, and the
	// receiving host stamps them so, as a kernel timestamp would.
	ReleaseEvery time.Duration
	// BurstLag delays a packet that queued behind another at the rated
	// link by BurstLag more than one that found it idle, keeping the
	// order: the far end's writer, idle before a burst, hands over its
	// first packet at once and the rest a moment later (a timer set on
	// the wake-up, a host's scheduling). The rate of a train timed from
	// its first packet then creeps up with every arrival.
	BurstLag time.Duration
}

type simDir struct {
	p         linkParams
	busyUntil time.Duration
	bad       bool
	sent      uint64
	dropped   uint64
	queueDrop uint64
	bytes     uint64
	lastAt    time.Duration // arrival of the latest packet (Jitter keeps order)
	// idle sums the time the bottleneck had nothing to send (the rated
	// link's queue empty) up to busyUntil; idleAt adds the idle time
	// since.
	idle time.Duration
}

// idleAt is how long the rated link of d had nothing to send before now.
func (d *simDir) idleAt(now time.Duration) time.Duration {
	return d.idle + max(now-d.busyUntil, 0)
}

type delivery struct {
	at      time.Duration
	arrived time.Duration // when it reached the host; at is when the host handed it over
	seq     uint64
	to      int
	path    int
	pn      uint64
	data    []byte
}

type deliveryHeap []delivery

func (h deliveryHeap) Len() int { return len(h) }
func (h deliveryHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h deliveryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *deliveryHeap) Push(x any)   { *h = append(*h, x.(delivery)) }
func (h *deliveryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// sim connects two associations.
type sim struct {
	t     testing.TB
	now   time.Duration
	a     [2]*Association
	dir   [2]*simDir // dir[i] carries packets sent by a[i]
	q     deliveryHeap
	seq   uint64
	rng   *rand.Rand
	buf   []byte
	apps  [2]*simApp
	steps int
	// sent counts each side's packets: Send must number them 0, 1, 2, ...
	sent [2]uint64
	// observe, if set, sees every packet handed to the link; returning
	// true drops it.
	observe func(from int, pkt []byte) (drop bool)
	pool    [][]byte
	// pathDir, if set, carries the packets of path k > 0 sent by side i in
	// pathDir[i][k] (path 0 in dir[i]); path k of one side is path k of
	// the other.
	pathDir [2][]*simDir
	// alarms are the application's own timers (simAlarm), earliest first.
	alarms []simAlarm
	// learn, if set, is called before a packet is handed to side to on
	// a path k > 0 that side has not set: a side that learns its paths
	// sets it there, as the tunnel does on a new source address.
	learn func(to, path int)
}

// simAlarm is an application timer: fn runs at virtual time at.
type simAlarm struct {
	at time.Duration
	fn func()
}

// after runs fn d from now, in virtual time (an application's own
// delay, such as a server that answers once its dial completes).
func (s *sim) after(d time.Duration, fn func()) {
	a := simAlarm{s.now + d, fn}
	i, _ := slices.BinarySearchFunc(s.alarms, a.at, func(x simAlarm, at time.Duration) int { return cmp.Compare(x.at, at+1) })
	s.alarms = slices.Insert(s.alarms, i, a)
}

func newSim(t testing.TB, seed uint64, cfgA, cfgB Config, ab, ba linkParams) *sim {
	t.Helper()
	s := &sim{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), buf: make([]byte, 65536)}
	cfgA.EvenStreams, cfgB.EvenStreams = true, false
	for i, c := range []Config{cfgA, cfgB} {
		a, err := NewAssociation(c, simEpoch)
		if err != nil {
			t.Fatalf("NewAssociation: %v", err)
		}
		s.a[i] = a
	}
	s.dir[0] = &simDir{p: ab}
	s.dir[1] = &simDir{p: ba}
	return s
}

func (s *sim) clock() time.Time { return simEpoch.Add(s.now) }

func (s *sim) getBuf(n int) []byte {
	if k := len(s.pool); k > 0 {
		b := s.pool[k-1]
		s.pool = s.pool[:k-1]
		if cap(b) >= n {
			return b[:n]
		}
	}
	return make([]byte, n, max(n, 2048))
}

// transmit puts packet pn sent by side from on the link (of its path).
func (s *sim) transmit(from, path int, pn uint64, pkt []byte) {
	d := s.dir[from]
	if path > 0 {
		d = s.pathDir[from][path]
	}
	d.sent++
	d.bytes += uint64(len(pkt))
	if s.observe != nil && s.observe(from, pkt) {
		d.dropped++
		return
	}
	at, copies := d.carry(s.now, s.rng, len(pkt))
	for i := 0; i < copies; i++ {
		b := s.getBuf(len(pkt))
		copy(b, pkt)
		s.seq++
		arrived := at + time.Duration(i)*time.Microsecond
		heap.Push(&s.q, delivery{at: d.handover(arrived), arrived: arrived, seq: s.seq, to: 1 - from, path: path, pn: pn, data: b})
	}
}

// carry models one packet of size bytes entering the direction at now:
// the drop-tail queue, serialization at the rate, loss, delay, jitter,
// reordering and duplication. It returns when the packet arrives and how
// many copies do (0: dropped).
func (d *simDir) carry(now time.Duration, rng *rand.Rand, size int) (at time.Duration, copies int) {
	if d.p.Down || d.p.cut(now) {
		d.dropped++
		return 0, 0
	}
	now = stallEnd(now, d.p.InStallEvery, d.p.InStallFor)
	if now >= d.p.HoldFrom && now < d.p.HoldUntil {
		now = d.p.HoldUntil
	}
	at = now
	lag := time.Duration(0)
	if d.p.Rate > 0 {
		start := max(now, d.busyUntil)
		if start > now {
			lag = d.p.BurstLag
		}
		if d.p.QueueBytes > 0 {
			queued := float64(start-now) / float64(time.Second) * d.p.Rate / 8
			if queued+float64(size) > float64(d.p.QueueBytes) {
				d.queueDrop++
				return 0, 0
			}
		}
		tx := time.Duration(float64(size+d.p.Overhead) * 8 / d.p.Rate * float64(time.Second))
		d.idle += max(now-d.busyUntil, 0)
		d.busyUntil = start + tx
		at = d.busyUntil
	}
	// Loss on the link (after the queue): random and burst.
	if d.p.BurstEnter > 0 {
		if d.bad {
			if rng.Float64() < d.p.BurstLeave {
				d.bad = false
			}
		} else if rng.Float64() < d.p.BurstEnter {
			d.bad = true
		}
		if d.bad {
			d.dropped++
			return 0, 0
		}
	}
	if d.p.Loss > 0 && rng.Float64() < d.p.Loss {
		d.dropped++
		return 0, 0
	}
	if d.p.cut(at) || d.p.cut(at+d.p.Delay) {
		d.dropped++
		return 0, 0
	}
	at += d.p.Delay
	if d.p.BurstLag > 0 {
		at = max(at+lag, d.lastAt)
		d.lastAt = at
	}
	if d.p.Jitter > 0 {
		at = max(at+time.Duration(rng.Int64N(int64(d.p.Jitter))), d.lastAt)
		d.lastAt = at
	}
	if e := d.p.ReleaseEvery; e > 0 {
		at = (at + e - 1) / e * e
	}
	if d.p.Reorder > 0 && rng.Float64() < d.p.Reorder {
		at += d.p.ReorderDelay
	}
	copies = 1
	if d.p.Dup > 0 && rng.Float64() < d.p.Dup {
		copies = 2
	}
	return at, copies
}

// cut reports whether t falls in one of the link's periodic outages.
func (p *linkParams) cut(t time.Duration) bool {
	return p.CutEvery > 0 && t >= p.CutEvery && t%p.CutEvery < p.CutFor
}

// handover is when the receiving host hands a packet that arrived at
// arrived to its association: at the end of the stall it arrived in.
func (d *simDir) handover(arrived time.Duration) time.Duration {
	return stallEnd(arrived, d.p.StallEvery, d.p.StallFor)
}

// stallEnd is when something that came at t goes on, given a stall of f
// in every e: at the end of the stall t falls in, else at t. The k-th
// stall begins somewhere in the k-th e (a fixed hash of k), so stalls do
// not keep step with the round trip.
func stallEnd(t, e, f time.Duration) time.Duration {
	if e <= f || f <= 0 || t < e {
		return t
	}
	k := t / e
	start := k*e + time.Duration(uint64(k)*0x9e3779b97f4a7c15%uint64(e-f))
	if t >= start && t < start+f {
		return start + f
	}
	return t
}

// sendResumes is when side i's host, stalled as its direction's
// SendStallEvery says, acts on something due at t.
func (s *sim) sendResumes(i int, t time.Duration) time.Duration {
	p := s.dir[i].p
	return stallEnd(t, p.SendStallEvery, p.SendStallFor)
}

// sendStalled reports whether side i's host is in a stall at t.
func (s *sim) sendStalled(i int, t time.Duration) bool { return s.sendResumes(i, t) > t }

// flush lets both sides send everything due now.
func (s *sim) flush() {
	for i := 0; i < 2; i++ {
		if s.sendStalled(i, s.now) {
			continue
		}
		for {
			n, pn, path := s.a[i].SendOn(s.clock(), s.buf)
			if n == 0 {
				break
			}
			if pn != s.sent[i] {
				s.t.Fatalf("side %d: packet numbered %d, want %d", i, pn, s.sent[i])
			}
			s.sent[i]++
			s.transmit(i, path, pn, s.buf[:n])
		}
	}
}

// pump delivers application events on both sides.
func (s *sim) pump() {
	for i := 0; i < 2; i++ {
		if s.apps[i] != nil {
			s.apps[i].pump()
		}
	}
}

// step advances to the next event and processes it. It returns false when
// nothing at all is scheduled.
func (s *sim) step() bool {
	s.pump()
	s.flush()
	s.pump()
	next := time.Duration(-1)
	if len(s.q) > 0 {
		next = s.q[0].at
	}
	if len(s.alarms) > 0 && (next < 0 || s.alarms[0].at < next) {
		next = s.alarms[0].at
	}
	for i := 0; i < 2; i++ {
		if d := s.a[i].Deadline(); !d.IsZero() {
			if t := s.sendResumes(i, d.Sub(simEpoch)); next < 0 || t < next {
				next = t
			}
		}
	}
	if next < 0 {
		return false
	}
	if next < s.now {
		next = s.now
	}
	if next == s.now {
		s.steps++
		if s.steps > 10000 {
			s.t.Fatalf("simulation spins at %v (deadlines %v / %v)", s.now, s.a[0].Deadline().Sub(simEpoch), s.a[1].Deadline().Sub(simEpoch))
		}
	} else {
		s.steps = 0
	}
	s.now = next
	for len(s.alarms) > 0 && s.alarms[0].at <= s.now {
		a := s.alarms[0]
		s.alarms = s.alarms[1:]
		a.fn()
	}
	for len(s.q) > 0 && s.q[0].at <= s.now {
		d := heap.Pop(&s.q).(delivery)
		if s.learn != nil && d.path > 0 && !s.a[d.to].paths.p[d.path].inUse {
			s.learn(d.to, d.path)
		}
		var arrived time.Time
		if !s.dir[1-d.to].p.StallUntimed {
			arrived = simEpoch.Add(d.arrived)
		}
		_ = s.a[d.to].ReceiveArrived(s.clock(), arrived, d.path, d.pn, d.data)
		s.pool = append(s.pool, d.data)
	}
	for i := 0; i < 2; i++ {
		if d := s.a[i].Deadline(); !d.IsZero() && !d.After(s.clock()) && !s.sendStalled(i, s.now) {
			s.a[i].Tick(s.clock())
		}
	}
	return true
}

// runUntil steps until cond holds or the virtual time limit passes.
func (s *sim) runUntil(limit time.Duration, cond func() bool) bool {
	for s.now < limit {
		if cond() {
			return true
		}
		if !s.step() {
			return cond()
		}
	}
	return cond()
}

// pattern is the content of byte off of a stream direction: a long
// non-repeating-looking sequence, so misplaced or duplicated bytes show.
var pattern = func() []byte {
	p := make([]byte, 65521) // prime length
	x := uint32(2463534242)
	for i := range p {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		p[i] = byte(x)
	}
	return p
}()

func patternAt(id uint64, dir int, off uint64) int {
	return int((off + id*977 + uint64(dir)*31337) % uint64(len(pattern)))
}

func fillPattern(b []byte, id uint64, dir int, off uint64) {
	i := patternAt(id, dir, off)
	for n := 0; n < len(b); {
		c := copy(b[n:], pattern[i:])
		n += c
		i = 0
	}
}

func checkPattern(b []byte, id uint64, dir int, off uint64) int {
	i := patternAt(id, dir, off)
	for k := range b {
		if b[k] != pattern[i] {
			return k
		}
		i++
		if i == len(pattern) {
			i = 0
		}
	}
	return -1
}

// appStream is one stream as the application model sees it.
type appStream struct {
	id     uint64
	toSend uint64 // bytes to write
	// avail, when not 0, is how much of toSend the application has
	// yet (data it is still receiving from elsewhere); the test raises
	// it and services the stream again.
	avail      uint64
	written    uint64
	finWritten bool
	received   uint64
	expect     int64 // bytes expected from the peer; -1 = unknown
	eof        bool
	closed     bool
	closeErr   error
	resetErr   error
	stallRead  bool // do not read (flow-control tests)
	resetAfter int64
	// replyAfterEOF: bytes to send once the peer's data is all read
	// (request/response over a half-closed stream).
	replyAfterEOF uint64
	eofAt         time.Duration
	// more: the writer has more to come (toSend grows): no FIN when it
	// catches up.
	more bool
	// held: write nothing and no FIN yet (an answer that waits for
	// something outside the association).
	held bool
}

// simApp drives one side's streams.
type simApp struct {
	t        testing.TB
	side     int // 0 or 1: pattern direction of what this side writes
	a        *Association
	streams  map[uint64]*appStream
	accepted int
	// onAccept decides what to send back on a peer stream.
	onAccept func(id uint64, meta []byte) *appStream
	closedAt error
	buf      []byte
	dgrams   int
	events   int
	outages  []bool // EventOutage reports, in order
	now      func() time.Duration
}

func newSimApp(t testing.TB, side int, a *Association) *simApp {
	return &simApp{t: t, side: side, a: a, streams: map[uint64]*appStream{}, buf: make([]byte, 64<<10)}
}

func (p *simApp) open(meta string, toSend uint64, expect int64) *appStream {
	return p.openWith(meta, &appStream{toSend: toSend, expect: expect, resetAfter: -1})
}

func (p *simApp) openWith(meta string, st *appStream) *appStream {
	id, err := p.a.OpenStream([]byte(meta))
	if err != nil {
		p.t.Fatalf("side %d OpenStream: %v", p.side, err)
	}
	st.id = id
	p.streams[id] = st
	p.service(st)
	return st
}

func (p *simApp) pump() {
	for {
		ev, ok := p.a.PollEvent()
		if !ok {
			return
		}
		p.events++
		switch ev.Kind {
		case EventAccept:
			meta := p.a.StreamMeta(ev.StreamID)
			want := fmt.Sprintf("stream-%d", ev.StreamID)
			if string(meta) != want {
				p.t.Errorf("side %d: stream %d meta %q, want %q", p.side, ev.StreamID, meta, want)
			}
			st := &appStream{id: ev.StreamID, expect: -1, resetAfter: -1}
			if p.onAccept != nil {
				if s2 := p.onAccept(ev.StreamID, meta); s2 != nil {
					st = s2
					st.id = ev.StreamID
				}
			}
			p.accepted++
			p.streams[ev.StreamID] = st
			p.service(st)
		case EventStream:
			if st, ok := p.streams[ev.StreamID]; ok {
				p.service(st)
			}
		case EventStreamClosed:
			if st, ok := p.streams[ev.StreamID]; ok {
				st.closed = true
				st.closeErr = ev.Err
			}
		case EventClosed:
			p.closedAt = ev.Err
		case EventOutage:
			p.outages = append(p.outages, ev.Outage)
		}
	}
}

// service writes and reads what it can on st.
func (p *simApp) service(st *appStream) {
	if st.closed || st.resetErr != nil {
		return
	}
	for !st.held && st.written < st.toSend {
		if st.resetAfter >= 0 && st.written >= uint64(st.resetAfter) {
			if err := p.a.StreamReset(st.id, 42); err != nil {
				p.t.Errorf("side %d reset %d: %v", p.side, st.id, err)
			}
			st.resetErr = ErrStreamClosed
			return
		}
		n := min(uint64(len(p.buf)), st.toSend-st.written)
		if st.avail > 0 {
			if st.written >= st.avail {
				break
			}
			n = min(n, st.avail-st.written)
		}
		b := p.buf[:n]
		fillPattern(b, st.id, p.side, st.written)
		w, err := p.a.StreamWrite(st.id, b)
		if err != nil {
			st.resetErr = err
			return
		}
		st.written += uint64(w)
		if w < len(b) {
			break
		}
	}
	if !st.held && st.written == st.toSend && !st.finWritten && !st.more && (st.replyAfterEOF == 0 || st.eof) {
		if err := p.a.StreamCloseWrite(st.id); err != nil {
			st.resetErr = err
			return
		}
		st.finWritten = true
	}
	if st.stallRead {
		return
	}
	for !st.eof {
		n, err := p.a.StreamRead(st.id, p.buf)
		if n > 0 {
			if k := checkPattern(p.buf[:n], st.id, 1-p.side, st.received); k >= 0 {
				p.t.Fatalf("side %d stream %d: wrong byte at offset %d", p.side, st.id, st.received+uint64(k))
			}
			st.received += uint64(n)
		}
		if err == io.EOF {
			st.eof = true
			st.eofAt = p.now()
			if st.expect >= 0 && st.received != uint64(st.expect) {
				p.t.Errorf("side %d stream %d: EOF after %d bytes, want %d", p.side, st.id, st.received, st.expect)
			}
			if st.replyAfterEOF > 0 && st.toSend == 0 {
				st.toSend = st.replyAfterEOF
				p.service(st)
			}
			break
		}
		if err != nil {
			st.resetErr = err
			return
		}
		if n == 0 {
			break
		}
	}
}

// done reports whether every stream finished both ways and left the table.
func (p *simApp) done() bool {
	for _, st := range p.streams {
		if !st.closed {
			return false
		}
	}
	return true
}

// attach creates the application models on both sides.
func (s *sim) attach() {
	for i := 0; i < 2; i++ {
		s.apps[i] = newSimApp(s.t, i, s.a[i])
		s.apps[i].now = func() time.Duration { return s.now }
	}
}
