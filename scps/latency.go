package scps

// This file owns the latency scheduler of a multipath association: when
// the next stream data to go is a light stream's (a new stream's first
// bytes, a request, a reply, a small write: streams' LightWaiting), the
// packet goes on the lowest-delay path that may carry data, not wherever
// bonding would put it, and waits for that path's window and pacer (a
// packet's time on a fast link, while bulk fills it): a short exchange
// then crosses the fast link instead of queueing behind bulk on a slow
// one.

// latencyPath is the path for a light stream's data among set (the paths
// that may carry data; bond.go): the lowest-delay one, when a light
// stream's data is next.
func (a *Association) latencyPath(set uint16) (int, bool) {
	if !a.streams.LightWaiting() {
		return 0, false
	}
	return a.fastestPath(set), true
}
