package tunnel

// Association parameters carried inside the (encrypted, authenticated)
// handshake payload, so each side learns the other's wire version, which
// association it has, its endpoint run and the link settings it was
// configured with. The bytes are specified in spec.md ("Association
// parameters"); the integers after the fixed part are the association's
// varints (scps/varint), shortest form only, so that every accepted
// payload has exactly one encoding.
//
// A handshake whose two payloads name the same association carries that
// association on (a rekey); any other begins a new one at both ends,
// identified by the handshake's own id (see assoc.go). A changed instance
// only tells the log that the peer restarted.

import (
	"encoding/binary"
	"errors"
	"fmt"

	"scpsvpn/scps/varint"
)

// wireVersion is the version of the formats the tunnel speaks (spec.md):
// 4 since association packets are frames only, their packet number the
// seal's counter (the overhead cut, docs/overhead.md); 3 had the
// association's varints in the parameters, 2 LEB128.
const wireVersion = 4

type assocParams struct {
	version  uint8
	caps     uint8
	instance uint64
	assoc    uint64
	up, down uint64 // bit/s, at most varint.Max
	rttMS    uint64 // at most varint.Max
}

// paramsFixed is the fixed part: version, capabilities, instance,
// association.
const paramsFixed = 2 + 8 + 8

func (p assocParams) marshal() []byte {
	b := make([]byte, paramsFixed, paramsFixed+3*8)
	b[0], b[1] = p.version, p.caps
	binary.BigEndian.PutUint64(b[2:], p.instance)
	binary.BigEndian.PutUint64(b[10:], p.assoc)
	b = varint.Append(b, p.up)
	b = varint.Append(b, p.down)
	b = varint.Append(b, p.rttMS)
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
		v, n := varint.Read(rest)
		if n == 0 || n != varint.Len(v) {
			return p, errBadParams
		}
		*f, rest = v, rest[n:]
	}
	if len(rest) != 0 {
		return p, errBadParams
	}
	return p, nil
}
