package scps

// This file owns datagramQueue, the outgoing datagram queue: a bounded
// ring of reusable buffers. Datagrams are never retransmitted; they wait only briefly for
// congestion window and pacer, and are dropped (and counted) when the queue
// is full or they have waited too long, because a late datagram (a DNS
// query, a ping) is worth less than the queue delay it would add.

import "time"

const (
	datagramQueueLen = 64
	// datagramMaxAge: a datagram not sent within this time is dropped.
	datagramMaxAge = 100 * time.Millisecond
)

type datagramQueue struct {
	buf   [datagramQueueLen][]byte
	at    [datagramQueueLen]time.Duration
	group [datagramQueueLen]uint64 // 0, or the group no packet carries two of
	head  int
	count int
	bytes int
}

func (q *datagramQueue) push(p []byte, group uint64, now time.Duration, maxSize int) bool {
	if q.count == datagramQueueLen {
		return false
	}
	i := (q.head + q.count) % datagramQueueLen
	if cap(q.buf[i]) < maxSize {
		q.buf[i] = make([]byte, 0, maxSize)
	}
	q.buf[i] = append(q.buf[i][:0], p...)
	q.at[i] = now
	q.group[i] = group
	q.count++
	q.bytes += len(p)
	return true
}

func (q *datagramQueue) front() ([]byte, time.Duration) {
	return q.buf[q.head], q.at[q.head]
}

// frontGroup is the group of the datagram in front.
func (q *datagramQueue) frontGroup() uint64 { return q.group[q.head] }

func (q *datagramQueue) pop() {
	q.bytes -= len(q.buf[q.head])
	q.head = (q.head + 1) % datagramQueueLen
	q.count--
}
