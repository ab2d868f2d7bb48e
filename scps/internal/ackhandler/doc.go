// Package ackhandler is the acknowledgement and loss handling of an scps
// association, shaped like quic-go's package of the same name: the
// sending side (SentPacketHandler: the sent-packet history, bytes in
// flight, RTT, loss detection, probe timeout, the loss-cause classifier,
// and the congestion controller and pacer those feed) and the receiving
// side (ReceivedPacketHandler: which packets arrived and when an ACK is
// due; AckBudget: the rate our ACK traffic is held to). It does no I/O and
// reads no clock: times are durations since the association's epoch,
// handed in by the caller. What the frames of a packet carried is the
// caller's business: a FrameHandler acts on them when the packet is
// acknowledged or lost.
//
// Where things are:
//
//	sentpackethandler.go  SentPacketHandler, Config, FrameHandler, Stats
//	history.go            history: the sent-packet and sent-frame rings;
//	                      SentPacket, SentFrame
//	pathstate.go          per-path RTT, congestion controller, pacer, bytes
//	                      in flight and loss detection of a multipath
//	                      association
//	lossclassifier.go     lossClassifier: congestion or corruption; LossMode
//	tailcopy.go           tailCopies: which packets a burst's end sends
//	                      again into the idle link (NextCopy, TakeCopy)
//	ackstate.go           ReceivedPacketHandler: received packets and the
//	                      ACK policy
//	ackbudget.go          AckBudget: the rate our ACK traffic is held to
//	bucket.go             bucket: pacer and ACK budget token buckets
package ackhandler
