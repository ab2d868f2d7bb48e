package tunnel

// Association parameters carried inside the (encrypted, authenticated)
// handshake payload, so each side learns the other's wire version, its
// association instance and the link settings it was configured with.
//
//	byte 0     version (1)
//	byte 1     capabilities (bit field, 0 for now)
//	8 bytes    association instance, random per endpoint run
//	varint     sender's up rate, bit/s (0 = unknown)
//	varint     sender's down rate, bit/s (0 = unknown)
//	varint     sender's configured RTT, milliseconds
//
// A changed instance means the peer restarted: its streams are gone, so ours
// are reset and a fresh association begins.

import (
	"encoding/binary"
	"errors"
	"fmt"
)

const wireVersion = 1

type assocParams struct {
	version  uint8
	caps     uint8
	instance uint64
	up, down uint64
	rttMS    uint64
}

func (p assocParams) marshal() []byte {
	b := make([]byte, 10, 10+3*binary.MaxVarintLen64)
	b[0], b[1] = p.version, p.caps
	binary.BigEndian.PutUint64(b[2:], p.instance)
	b = binary.AppendUvarint(b, p.up)
	b = binary.AppendUvarint(b, p.down)
	b = binary.AppendUvarint(b, p.rttMS)
	return b
}

var errBadParams = errors.New("malformed association parameters")

func parseParams(b []byte) (assocParams, error) {
	var p assocParams
	if len(b) < 10 {
		return p, errBadParams
	}
	p.version, p.caps = b[0], b[1]
	if p.version != wireVersion {
		return p, fmt.Errorf("peer speaks wire version %d, we speak %d: run the same scpsvpn release at both ends", p.version, wireVersion)
	}
	p.instance = binary.BigEndian.Uint64(b[2:])
	rest := b[10:]
	for _, f := range []*uint64{&p.up, &p.down, &p.rttMS} {
		v, n := binary.Uvarint(rest)
		if n <= 0 {
			return p, errBadParams
		}
		*f, rest = v, rest[n:]
	}
	return p, nil
}
