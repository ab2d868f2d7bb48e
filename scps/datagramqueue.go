package scps

// This file owns datagramQueue, the outgoing datagram queue: a bounded
// ring of reusable buffers. Datagrams are never retransmitted; they wait only briefly for
// congestion window and pacer, and are dropped (and counted) when the queue
// is full or they have waited too long, because a late datagram (a DNS
// query, a ping) is worth less than the queue delay it would add. A
// datagram of a group (an erasure-coded block) may wait longer
// (groupMaxAge): its loss costs its flow a resend's round trip.

import "time"

const (
	datagramQueueLen = 64
	// datagramMaxAge: a datagram not sent within this time is dropped.
	datagramMaxAge = 100 * time.Millisecond
)

// groupMaxAge is how long a datagram of a group may wait: up to a round
// trip. The far end rebuilds or asks again for what its group lost, and
// holds the flow behind the gap meanwhile, so a dropped one costs the
// flow at least a round trip of holding where a late one costs only its
// lateness. On a host starved of the processor for over datagramMaxAge
// the association dropped hundreds of a repaired QUIC flow's datagrams
// at once. The sender of a group waits for DatagramRoom, so few wait
// here at once.
func groupMaxAge(srtt time.Duration) time.Duration {
	return max(datagramMaxAge, srtt)
}

// maxPostpone bounds how much later than its age allows a datagram may
// still go when its association was not run (postpone): a host stalled
// for longer drops them as before.
const maxPostpone = 500 * time.Millisecond

type datagramQueue struct {
	buf    [datagramQueueLen][]byte
	until  [datagramQueueLen]time.Duration // dropped after this, unsent
	latest [datagramQueueLen]time.Duration // until may be postponed to this
	group  [datagramQueueLen]uint64        // 0, or the group no packet carries two of
	head   int
	count  int
	bytes  int
}

func (q *datagramQueue) push(p []byte, group uint64, until time.Duration, maxSize int) bool {
	if q.count == datagramQueueLen {
		return false
	}
	i := (q.head + q.count) % datagramQueueLen
	if cap(q.buf[i]) < maxSize {
		q.buf[i] = make([]byte, 0, maxSize)
	}
	q.buf[i] = append(q.buf[i][:0], p...)
	q.until[i], q.latest[i] = until, until+maxPostpone
	q.group[i] = group
	q.count++
	q.bytes += len(p)
	return true
}

// front is the datagram in front and when it expires.
func (q *datagramQueue) front() ([]byte, time.Duration) {
	return q.buf[q.head], q.until[q.head]
}

// frontGroup is the group of the datagram in front.
func (q *datagramQueue) frontGroup() uint64 { return q.group[q.head] }

// expire drops the datagrams whose time passed (wherever they wait: a
// plain one behind a group's younger one too), keeping the others'
// order; it returns how many it dropped.
func (q *datagramQueue) expire(now time.Duration) int {
	kept := 0
	for k := range q.count {
		i := (q.head + k) % datagramQueueLen
		if now > q.until[i] {
			q.bytes -= len(q.buf[i])
			continue
		}
		if j := (q.head + kept) % datagramQueueLen; j != i {
			// Swapped, so the dropped one's buffer is reused.
			q.buf[i], q.buf[j] = q.buf[j], q.buf[i]
			q.until[j], q.latest[j], q.group[j] = q.until[i], q.latest[i], q.group[i]
		}
		kept++
	}
	dropped := q.count - kept
	q.count = kept
	return dropped
}

// postpone moves the queued datagrams' expiry d later, as far as their
// latest: d is time the association was not run while they could have
// gone (Association.setNow), which their age does not count. A host
// starved of the processor for over datagramMaxAge dropped a repaired
// QUIC flow's queued datagrams and their parities at once (docs/quic.md);
// for a flow's last ones its receiver has nothing to ask again for.
func (q *datagramQueue) postpone(d time.Duration) {
	for k := range q.count {
		i := (q.head + k) % datagramQueueLen
		q.until[i] = min(q.until[i]+d, q.latest[i])
	}
}

func (q *datagramQueue) pop() {
	q.bytes -= len(q.buf[q.head])
	q.head = (q.head + 1) % datagramQueueLen
	q.count--
}
