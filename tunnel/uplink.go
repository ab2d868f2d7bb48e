package tunnel

// The uplink rate toward each peer, as measured, for a peer whose
// [peer.link] up is not configured: peers bounds cookie replies to that
// peer's endpoint to a share of it (peers/cookielimit.go). The measure is
// the highest delivery rate the peer's association has reached: a lower
// bound of the path's capacity that only grows as the path is used.

// measureUplinks passes each unconfigured peer's highest delivery rate
// on to peers. It runs on the timers routine, which alone writes
// assoc.measuredUp.
func (e *Endpoint) measureUplinks() {
	for _, a := range e.assocList() {
		cur := a.cur.Load()
		if a.cfg.Link.Up > 0 || cur == nil {
			continue
		}
		rate := int64(cur.sess.Stats().DeliveryRate * 8)
		if rate <= a.measuredUp {
			continue
		}
		a.measuredUp = rate
		if p, ok := e.dev.Peer(a.cfg.Name); ok {
			p.SetMeasuredUp(rate)
		}
	}
}
