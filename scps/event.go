package scps

// This file owns Event, what the association reports to its driver, and
// the queue the driver drains with PollEvent.

import "scpsvpn/scps/internal/streams"

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventAccept: the peer opened StreamID and its metadata arrived.
	EventAccept EventKind = iota + 1
	// EventStream: StreamID became readable or writable, or was reset by
	// the peer: retry blocked reads and writes.
	EventStream
	// EventStreamClosed: StreamID left the stream table. Err is nil when
	// both directions finished, a *ResetError when the peer reset it, or
	// the local reason.
	EventStreamClosed
	// EventClosed: the association closed; Err says why.
	EventClosed
	// EventOutage: the association entered (Outage true) or left (false)
	// outage mode.
	EventOutage
)

// Event is something the driver must act on.
type Event struct {
	Kind     EventKind
	StreamID uint64
	Err      error
	Outage   bool // EventOutage: entered (true) or left (false)
	s        *streams.State
}

// PollEvent returns the next event, if any.
func (a *Association) PollEvent() (Event, bool) {
	if a.evHead == len(a.events) {
		return Event{}, false
	}
	ev := a.events[a.evHead]
	a.events[a.evHead] = Event{}
	a.evHead++
	if a.evHead == len(a.events) {
		a.events, a.evHead = a.events[:0], 0
	}
	if ev.Kind == EventStream && ev.s != nil {
		ev.s.EventTaken()
	}
	ev.s = nil
	return ev, true
}

func (a *Association) emit(ev Event) { a.events = append(a.events, ev) }

// assocEvents is the association's event queue as the streams' event sink
// (streams.Events).
type assocEvents struct{ a *Association }

// Notify queues an EventStream for s (one at a time: the streams hold
// back the next until PollEvent hands this one out).
func (e assocEvents) Notify(s *streams.State) {
	e.a.emit(Event{Kind: EventStream, StreamID: s.ID(), s: s})
}

// Accepted counts and reports a stream the peer opened.
func (e assocEvents) Accepted(s *streams.State) {
	e.a.stats.StreamsAccepted++
	e.a.emit(Event{Kind: EventAccept, StreamID: s.ID()})
}

// Closed reports that s left the table, with why: the peer's reset, or
// our own reason when we reset it.
func (e assocEvents) Closed(s *streams.State) {
	e.a.emit(Event{Kind: EventStreamClosed, StreamID: s.ID(), Err: s.CloseErr()})
}
