package scps

// This file owns the share of the link between datagrams and streams.
// Datagrams (everything that is not TCP: DNS, ping, but also a UDP flood
// from a LAN) used to go ahead of every stream, so a saturating UDP sender
// at one site starved every TCP flow of the association. Now, while both
// have data waiting, each packet is filled first from the side that is
// behind its share: datagrams may take one byte for every two of stream
// data (a third of the link), streams the rest; whatever one side leaves
// unused goes to the other. The lead either side may build up is bounded,
// so an idle period does not bank a burst.

const (
	// datagramWeight and streamWeight: the shares of the link while both
	// datagrams and streams have data waiting.
	datagramWeight = 1
	streamWeight   = 2
	// maxShareLead bounds the balance (in weighted bytes) one side may
	// bank: a few packets.
	maxShareLead = 4 * 1500 * datagramWeight * streamWeight
)

// shareBalance is positive when datagrams got more than their share.
type shareBalance struct{ lead int }

// datagramsFirst reports whether this packet should start with datagrams:
// they are within their share, or no stream has data to send.
func (sh *shareBalance) datagramsFirst(streamsWaiting bool) bool {
	return !streamsWaiting || sh.lead <= 0
}

// charge books what one packet carried of each.
func (sh *shareBalance) charge(datagramBytes, streamBytes int) {
	sh.lead += datagramBytes*streamWeight - streamBytes*datagramWeight
	sh.lead = max(-maxShareLead, min(sh.lead, maxShareLead))
}
