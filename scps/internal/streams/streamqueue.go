package streams

// This file owns Queue, the FIFO of streams the packet scheduler
// draws from (retransmission, light, bulk and control queues).

// Queue is a FIFO of streams; entries of removed streams are skipped.
type Queue struct {
	q    []*State
	head int
}

func (q *Queue) Push(s *State) {
	if q.head > 0 && len(q.q) == cap(q.q) {
		n := copy(q.q, q.q[q.head:])
		clear(q.q[n:])
		q.q, q.head = q.q[:n], 0
	}
	q.q = append(q.q, s)
}

func (q *Queue) Pop() *State {
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

func (q *Queue) Peek() *State {
	if q.head == len(q.q) {
		return nil
	}
	return q.q[q.head]
}

func (q *Queue) Len() int { return len(q.q) - q.head }

// At is the i-th stream from the head (i < Len).
func (q *Queue) At(i int) *State { return q.q[q.head+i] }

func (q *Queue) Clear() {
	clear(q.q)
	q.q, q.head = q.q[:0], 0
}
