// Package peers owns scpsvpn's security layer: X25519 identities, the Noise
// IK handshake, AEAD sealing of association packets, the replay window, and
// the peer table with subnet -> peer routing.
//
// It is sans-IO. The tunnel owns the UDP socket and the timers:
//
//	d, err := peers.NewDevice(priv, cfgs, peers.Options{Payload: params})
//	// every received datagram:
//	r, err := d.Receive(src, pkt, buf)   // err: dropped and counted, nothing to send
//	send(r.Send...)                      // handshake answers, confirmations
//	if r.Established { /* r.RemotePayload, r.LocalPayload: both sides' association parameters */ }
//	if r.Data != nil { /* association packet r.Counter from r.Peer, on session r.Session */ }
//	// every packet to send:
//	p, _ := d.Lookup(dstIP)              // or d.Peer(name)
//	out, to, err := p.Seal(pkt, buf)     // ErrNoSession: p.Initiate(), send it
//	out, to, err = p.SealOn(id, pn, pkt, buf) // packet number pn, only on session id
//	dg, ok, err := p.Connect(fresh)      // a new handshake although a session is current
//	// every 100-250 ms:
//	send(d.Tick()...)                    // retransmissions, rekeying
//
// The wire format is in spec.md beside this file. Seal and Receive of
// transport packets take no per-packet allocation and no lock beyond a read
// lock on the index table and the session's replay window.
package peers
