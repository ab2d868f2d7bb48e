package scps

// This file owns the bonding scheduler: which working path the next packet
// goes on when several may carry data (docs/multipath.md, "Bonding"). Each
// path has its own congestion controller and pacer (internal/ackhandler,
// pathstate.go), so a bulk transfer spreads across the paths in
// proportion to what each delivers: a packet goes on the path whose window
// has room and whose pacer lets it go first; among those ready together,
// on the one whose data clock is behind (bondClock: each path's share at
// its link's rate, so a sender slower than the paths still spreads its
// data across them), and a repair on the lowest-delay one. Repairs are
// stream data like any other and go on whichever path sends next, so a
// loss on one path may be repaired on another.
//
// The paths that may carry data: on a side told its paths, the working
// paths of the best role present (primaries; backups only while no
// primary works); on a side that only learned them, the working paths the
// peer sent anything but probes on within bondRecent, and the data path
// (choosePath). A told side spreads its packets that carry no data (ACKs)
// over its data paths in turn, so its peer sees traffic on each and
// bonds across the same ones.

import (
	"math/bits"
	"time"

	"scpsvpn/scps/cc"
)

// bondRecent: a learned path the peer sent traffic on this recently may
// carry data (the peer's ACKs come several times per round trip on each
// path it bonds).
const bondRecent = 200 * time.Millisecond

// rank orders paths by role for a side told its paths: configured
// primaries, then learned paths, then backups.
func (p *path) rank() int {
	switch {
	case p.opts.Backup || p.peerBackup:
		return 2
	case p.opts.Learned:
		return 1
	}
	return 0
}

// dataPaths returns the set of paths that may carry data now (bit i:
// path i); it always holds the data path.
func (a *Association) dataPaths() (set uint16) {
	ps := &a.paths
	set = 1 << ps.data
	d := &ps.p[ps.data]
	if !d.up {
		return set
	}
	learned := ps.learnedOnly()
	for i := range ps.p {
		p := &ps.p[i]
		if !p.inUse || p.retired || !p.up {
			continue
		}
		if learned && p.lastTraffc > 0 && a.now-p.lastTraffc <= bondRecent && ps.learnedBackupOK(i, a.now) || !learned && p.rank() == d.rank() {
			set |= 1 << i
		}
	}
	return set
}

// sendPath picks the path for the next packet (see the file's comment) and
// makes it the one the sent-packet handler speaks of. rotate, when no path
// may carry data now, moves a told side's packets (ACKs) on to the next
// data path.
func (a *Association) sendPath(rotate bool) int {
	set := a.dataPaths()
	a.setLowDelay(set)
	if set&(set-1) == 0 {
		a.paths.lightNext = a.streams.LightWaiting()
		a.sent.Use(a.paths.data)
		return a.paths.data
	}
	best, bestAt, bestShare, bestRTT := -1, time.Duration(0), time.Duration(0), time.Duration(0)
	repair := a.streams.RetxQ.Len() > 0
	// Bulk data next (no repair, no light stream's): a slower path may
	// catch up on its data clock (below).
	fastest, catchUp := a.fastestPath(set), !repair && a.streams.LightQ.Len() == 0 && a.streams.BulkQ.Len() > 0
	if catchUp {
		ready := false
		for s := set; s != 0; s &= s - 1 {
			a.sent.Use(bits.TrailingZeros16(s))
			ready = ready || a.sent.WindowOpen() && a.sent.PacedAt(a.now) == 0
		}
		catchUp = ready
	}
	quiet := a.quietPath()
	for s := set; s != 0; s &= s - 1 {
		i := bits.TrailingZeros16(s)
		a.sent.Use(i)
		if !a.sent.WindowOpen() || i == quiet && !repair {
			continue
		}
		at, share, rtt := a.sent.PacedAt(a.now), a.bondClock(i), a.delayRank(i)
		if at > 0 && catchUp && i != fastest && share+2*(at-a.now) <= a.now {
			// Bulk data goes now, and this slower path's data clock
			// lags by more than twice its pacer's wait: it carried
			// less than its rate over the horizon (a sender whose
			// data comes in bursts, which the paths ready take
			// whole), so it takes part as if ready, in bursts of at
			// most half its lag. Never the lowest-delay path, whose
			// queue light streams wait in (latency.go).
			at = 0
		}
		if repair {
			// A repair fills a hole the reader waits on: among the
			// paths ready at once, the lowest-delay one.
			share = 0
		}
		if best < 0 || at < bestAt || at == bestAt && (share < bestShare || share == bestShare && rtt < bestRTT) {
			best, bestAt, bestShare, bestRTT = i, at, share, rtt
		}
	}
	if best < 0 {
		best = a.paths.data
	}
	i, light := a.latencyPath(set)
	if light {
		best = i
	}
	a.paths.lightNext = light
	if rotate && !a.hasWork() && !a.paths.learnedOnly() {
		// No data waits: the packet is an ACK or a probe. It goes on
		// the lowest-delay data path, every ackSpread-th on the next
		// other one in turn, so the peer sees traffic on each.
		best = a.fastestPath(set)
		if a.paths.acksSent%ackSpread == ackSpread-1 {
			for range MaxPaths {
				a.paths.ackNext = (a.paths.ackNext + 1) % MaxPaths
				if set&(1<<a.paths.ackNext) != 0 {
					best = a.paths.ackNext
					break
				}
			}
		}
		if i, ok := a.ackStarved(set); ok {
			best = i
		}
	}
	a.sent.Use(best)
	return best
}

// bondHorizon bounds how far a path's data clock (bondClock) may lag
// behind now: the share a path that sent nothing for a while may catch up
// on is this long at its rate, not all the time it was idle.
const bondHorizon = 10 * time.Millisecond

// bondClock is path i's data clock: when its data sent so far would have
// gone out at its pacing rate, starting no earlier than bondHorizon ago.
// Among the paths ready to send at once, the packet goes on the one whose
// clock is behind, so while the sender has less to send than the paths
// take (a server or a loaded host slower than the links), each path still
// carries data in proportion to its rate: before, the ready path of the
// lowest delay took every packet, and a GEO beside a LEO that the sender
// never filled carried 0-4% of the data through the binary (its slow
// start paced at twice a delivery rate it was never given the data to
// raise). While the sender fills the paths, their windows and pacers
// decide, as before. The clock runs at the path's link rate as its
// controller estimates it (PathClockRate): a LEO the sender does not
// fill is paced at three times its link, and by that rate it took 29
// packets of each burst for the GEO's one. A slower path whose clock
// lags takes part among the paths ready even while its own pacer holds
// it (sendPath): its pacer lets two packets go at a time, and a sender
// whose data comes in bursts (a netstack that hands over a window at a
// time) left it those two per burst, a GEO 2.6% of the data beside a
// LEO (TestBondLEOGEOSupply).
func (a *Association) bondClock(i int) time.Duration {
	return max(a.paths.p[i].share, a.now-bondHorizon)
}

// bondCharge advances path i's data clock by a packet of n bytes at its
// pacing rate (none while it is not paced: a first flight).
func (a *Association) bondCharge(i, n int) {
	p := &a.paths.p[i]
	p.share = a.bondClock(i)
	if r := a.sent.PathClockRate(i); r > 0 {
		p.share += time.Duration(float64(n) / r * float64(time.Second))
	}
}

// ackSpread: one in this many of a told side's packets without data goes
// on another data path than the lowest-delay one.
const ackSpread = 8

// ackStarveGap: a data path that carried none of a told side's traffic
// for this long takes its next packet without data, whatever the count,
// so the learned peer, which bonds only across the paths it heard
// traffic on within bondRecent, never drops one. One in ackSpread is not
// enough where ACKs are few or held back (an ACK budget set by told
// rates): the peer then dropped the GEO path beside a cellular one for
// a moment every second or so, and each time its window there drained.
const ackStarveGap = bondRecent / 4

// ackStarved is the data path of set that carried no traffic of ours
// for ackStarveGap or more, the longest so, if any.
func (a *Association) ackStarved(set uint16) (int, bool) {
	best, oldest := -1, a.now-ackStarveGap
	for s := set; s != 0; s &= s - 1 {
		i := bits.TrailingZeros16(s)
		if t := a.paths.p[i].lastOut; t <= oldest {
			best, oldest = i, t
		}
	}
	return best, best >= 0
}

// fastestPath is the path of set with the lowest delay (delayRank).
func (a *Association) fastestPath(set uint16) int {
	best, bestRTT := a.paths.data, time.Duration(0)
	for s := set; s != 0; s &= s - 1 {
		i := bits.TrailingZeros16(s)
		if rtt := a.delayRank(i); bestRTT == 0 || rtt < bestRTT {
			best, bestRTT = i, rtt
		}
	}
	return best
}

// delayRank orders paths by delay: path i's smoothed RTT as its data
// measured it, or while no data of it was acknowledged yet, as its
// probes did; while neither did and the RTT was not told for it (a
// learned path, or one told none), after every path whose delay is
// known. Before a path carries data its controller's RTT is the initial
// one, on a side that learned its paths another link's (the first's):
// a learned GEO beside a LEO passed for the faster path in the bulk's
// first round trips (its initial 40 ms below the LEO's measured RTT
// with a slow start's queue), and the answer to a request on a new
// connection went the GEO's way, 431 ms where the LEO's took 45 ms
// through the binary; in the simulator the learned side's ACKs went
// there too, and the far side took its LEO down for want of them
// (TestPathLatencyBulkStart).
func (a *Association) delayRank(i int) time.Duration {
	if r := a.sent.PathRTT(i); r.Samples() > 0 {
		return r.Smoothed()
	}
	p := &a.paths.p[i]
	if p.rtt.Samples() > 0 {
		return p.rtt.Smoothed()
	}
	if p.opts.Learned || p.opts.UntoldRTT {
		return unknownDelay + a.sent.PathRTT(i).Smoothed()
	}
	return a.sent.PathRTT(i).Smoothed()
}

// unknownDelay places a path of unknown delay after the others in
// delayRank.
const unknownDelay = time.Hour

// windowRTT is the RTT the automatic windows are sized by: the longest
// smoothed RTT of the paths that may carry data, since the receiver must
// hold what the fast paths deliver while the slow one's data is on its way.
func (a *Association) windowRTT() time.Duration {
	rtt := a.sent.RTT().Smoothed()
	if !a.paths.multi() {
		return rtt
	}
	for s := a.dataPaths(); s != 0; s &= s - 1 {
		rtt = max(rtt, a.sent.PathRTT(bits.TrailingZeros16(s)).Smoothed())
	}
	return rtt
}

// pacingRate is the sum of the data paths' pacing rates (bytes/s).
func (a *Association) pacingRate() float64 {
	if !a.paths.multi() {
		return a.sent.PacingRate()
	}
	var r float64
	for s := a.dataPaths(); s != 0; s &= s - 1 {
		r += a.sent.PathPacingRate(bits.TrailingZeros16(s))
	}
	return r
}

// minReorderHold is the least time a hole among packets of several paths
// is kept after the peer learned of it: above scheduling noise on paths
// of sub-millisecond RTT.
const minReorderHold = 100 * time.Millisecond

// reorderHold is how long a hole the peer knows of may still be filled
// by a packet on its way on a slower path: twice the longest smoothed RTT
// of the paths in use, at least minReorderHold (ackstate.go,
// OnAckAckedAt). A path's RTT is the longer of its controller's (data
// packets) and its probes' (paths.go): a path that carries only probes
// and ACKs has no controller samples, and its initial RTT may be another
// link's; holding its holes that short dropped the peer's ACKs and probes
// on a slow path as duplicates, so the path looked dead at the peer and
// carried no data. A retired path counts too: the peer's probes on it,
// a slow link's round trip late, are what bring it back. A path none of
// whose packets was acknowledged yet holds them unmeasuredHold: a side
// that learned its paths knows nothing of a new one's delay (its initial
// RTT is the first link's), and through the binary the learned side of
// a LEO+GEO pair dropped every packet the GEO brought as a duplicate
// (its holes held 100 ms, the GEO's way 300 ms or more), so neither side
// heard the other on it and it carried nothing for 12 s.
func (a *Association) reorderHold() time.Duration {
	hold := minReorderHold
	for i := range a.paths.p {
		if p := &a.paths.p[i]; p.inUse {
			hold = max(hold, 2*a.sent.PathRTT(i).Smoothed(), 2*p.rtt.Smoothed())
			if p.rtt.Samples() == 0 && a.paths.multi() {
				hold = max(hold, unmeasuredHold)
			}
		}
	}
	return hold
}

// unmeasuredHold is the least reorderHold while a path's RTT is unknown:
// twice a GEO's 600 ms round trip with its modem queue full.
const unmeasuredHold = 2 * time.Second

// setLowDelay tells the controller of the lowest-delay path of set, when
// set holds several, to keep the least queue (cc.LowDelayer), and every
// other path's not to.
func (a *Association) setLowDelay(set uint16) {
	fast := -1
	if set&(set-1) != 0 {
		fast = a.fastestPath(set)
	}
	for i := range a.paths.p {
		if !a.paths.p[i].inUse {
			continue
		}
		if c, ok := a.sent.PathController(i).(cc.LowDelayer); ok {
			c.SetLowDelay(i == fast)
		}
	}
}
