package tunnel

// Association parameters carried inside the (encrypted, authenticated)
// handshake payload, so each side learns the other's wire version, which
// association it has, its endpoint run and the link settings it was
// configured with.
//
//	byte 0     version (2)
//	byte 1     capabilities (bit field, 0 for now)
//	8 bytes    endpoint instance, random per endpoint run
//	8 bytes    association: the id of the handshake that began the
//	           sender's current association with the receiver, 0 if it
//	           has none
//	varint     sender's up rate, bit/s (0 = unknown)
//	varint     sender's down rate, bit/s (0 = unknown)
//	varint     sender's configured RTT, milliseconds
//
// A handshake whose two payloads name the same association carries that
// association on (a rekey); any other begins a new one at both ends,
// identified by the handshake's own id (see assoc.go). A changed instance
// only tells the log that the peer restarted.

import (
	"encoding/binary"
	"errors"
	"fmt"
)

const wireVersion = 2

type assocParams struct {
	version  uint8
	caps     uint8
	instance uint64
	assoc    uint64
	up, down uint64
	rttMS    uint64
}

const paramsFixed = 2 + 8 + 8

func (p assocParams) marshal() []byte {
	b := make([]byte, paramsFixed, paramsFixed+3*binary.MaxVarintLen64)
	b[0], b[1] = p.version, p.caps
	binary.BigEndian.PutUint64(b[2:], p.instance)
	binary.BigEndian.PutUint64(b[10:], p.assoc)
	b = binary.AppendUvarint(b, p.up)
	b = binary.AppendUvarint(b, p.down)
	b = binary.AppendUvarint(b, p.rttMS)
	return b
}

var errBadParams = errors.New("malformed association parameters")

func parseParams(b []byte) (assocParams, error) {
	var p assocParams
	if len(b) < 2 {
		return p, errBadParams
	}
	p.version, p.caps = b[0], b[1]
	if p.version != wireVersion {
		return p, fmt.Errorf("peer speaks wire version %d, we speak %d: run the same scpsvpn release at both ends", p.version, wireVersion)
	}
	if len(b) < paramsFixed {
		return p, errBadParams
	}
	p.instance = binary.BigEndian.Uint64(b[2:])
	p.assoc = binary.BigEndian.Uint64(b[10:])
	rest := b[paramsFixed:]
	for _, f := range []*uint64{&p.up, &p.down, &p.rttMS} {
		v, n := binary.Uvarint(rest)
		if n <= 0 {
			return p, errBadParams
		}
		*f, rest = v, rest[n:]
	}
	return p, nil
}
