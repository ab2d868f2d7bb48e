package scps

// This file owns streamQueue, the FIFO of streams the packet scheduler
// draws from (retransmission, light, bulk and control queues).

// streamQueue is a FIFO of streams; entries of removed streams are skipped.
type streamQueue struct {
	q    []*streamState
	head int
}

func (q *streamQueue) push(s *streamState) {
	if q.head > 0 && len(q.q) == cap(q.q) {
		n := copy(q.q, q.q[q.head:])
		clear(q.q[n:])
		q.q, q.head = q.q[:n], 0
	}
	q.q = append(q.q, s)
}

func (q *streamQueue) pop() *streamState {
	if q.head == len(q.q) {
		return nil
	}
	s := q.q[q.head]
	q.q[q.head] = nil
	q.head++
	if q.head == len(q.q) {
		q.q, q.head = q.q[:0], 0
	}
	return s
}

func (q *streamQueue) peek() *streamState {
	if q.head == len(q.q) {
		return nil
	}
	return q.q[q.head]
}

func (q *streamQueue) len() int { return len(q.q) - q.head }

func (q *streamQueue) clear() {
	clear(q.q)
	q.q, q.head = q.q[:0], 0
}
