// wire.go owns the byte layout of the four datagram kinds (handshake
// initiation, handshake response, cookie reply, transport) and their
// decoders. spec.md
// beside this file describes the same layout for humans. Decoders only check
// lengths and split fields; authentication happens in handshake.go and
// session.go.

package peers

import (
	"crypto/subtle"
	"encoding/binary"
	"errors"

	"golang.org/x/crypto/blake2s"
)

// Datagram kinds, the first byte of every datagram.
const (
	typeInitiation  byte = 1
	typeResponse    byte = 2
	typeCookieReply byte = 3
	typeTransport   byte = 4
)

const (
	// HeaderLen is the transport header: type (1), receiver index (4),
	// counter (8). A caller may place the plaintext at dst[HeaderLen:] before
	// Seal to encrypt in place.
	HeaderLen = 1 + 4 + 8
	// TagLen is the ChaCha20-Poly1305 authentication tag.
	TagLen = 16
	// Overhead is what Seal adds to an association packet.
	Overhead = HeaderLen + TagLen
	// MaxHandshakePayload bounds the opaque payload carried in a handshake
	// message, so handshake datagrams stay well below a 1280-byte path MTU.
	MaxHandshakePayload = 1024

	dhLen   = 32
	aeadTag = 16
	macLen  = 16
	idxLen  = 4
	tsLen   = 8

	initPayloadHeader = idxLen + tsLen // sender index, timestamp
	respPayloadHeader = idxLen         // sender index

	// Initiation: type | e | enc(s) | enc(sender index, timestamp, payload) | mac1 | mac2.
	initMinLen = 1 + dhLen + dhLen + aeadTag + initPayloadHeader + aeadTag + macLen + macLen
	initMaxLen = initMinLen + MaxHandshakePayload
	// Response: type | receiver index | e | enc(sender index, payload) | mac1.
	respMinLen = 1 + idxLen + dhLen + respPayloadHeader + aeadTag + macLen
	respMaxLen = respMinLen + MaxHandshakePayload
	// Cookie reply: type | mac1 of the initiation | nonce | enc(cookie).
	cookieReplyLen = 1 + macLen + xNonceLen + cookieLen + aeadTag
)

var errMalformed = errors.New("malformed")

// transportHeader is a decoded transport datagram. The nonce is the 12 bytes
// receiver index + counter, taken straight from the packet so sealing and
// opening need no scratch buffer.
type transportHeader struct {
	receiver uint32
	counter  uint64
	nonce    []byte // pkt[1:13]
	sealed   []byte // ciphertext and tag
}

func decodeTransport(pkt []byte) (transportHeader, error) {
	if len(pkt) < Overhead || pkt[0] != typeTransport {
		return transportHeader{}, errMalformed
	}
	return transportHeader{
		receiver: binary.LittleEndian.Uint32(pkt[1:5]),
		counter:  binary.LittleEndian.Uint64(pkt[5:13]),
		nonce:    pkt[1:13],
		sealed:   pkt[HeaderLen:],
	}, nil
}

func putTransportHeader(b []byte, receiver uint32, counter uint64) {
	b[0] = typeTransport
	binary.LittleEndian.PutUint32(b[1:5], receiver)
	binary.LittleEndian.PutUint64(b[5:13], counter)
}

// initiationParts is a split initiation: the Noise message, and each MAC
// with the bytes it covers (mac1: everything before it; mac2: everything
// before it, mac1 included).
type initiationParts struct {
	noiseMsg    []byte
	mac1d, mac1 []byte
	mac2d, mac2 []byte
}

func decodeInitiation(pkt []byte) (initiationParts, error) {
	if len(pkt) < initMinLen || len(pkt) > initMaxLen || pkt[0] != typeInitiation {
		return initiationParts{}, errMalformed
	}
	n2 := len(pkt) - macLen
	n1 := n2 - macLen
	return initiationParts{noiseMsg: pkt[1:n1], mac1d: pkt[:n1], mac1: pkt[n1:n2], mac2d: pkt[:n2], mac2: pkt[n2:]}, nil
}

// decodeCookieReply splits a cookie reply into the mac1 it answers, the
// nonce and the sealed cookie.
func decodeCookieReply(pkt []byte) (mac1, nonce, sealed []byte, err error) {
	if len(pkt) != cookieReplyLen || pkt[0] != typeCookieReply {
		return nil, nil, nil, errMalformed
	}
	return pkt[1 : 1+macLen], pkt[1+macLen : 1+macLen+xNonceLen], pkt[1+macLen+xNonceLen:], nil
}

// decodeResponse splits a response into the receiver index (the initiator's
// sender index), the Noise message and the MAC.
func decodeResponse(pkt []byte) (receiver uint32, noiseMsg, macd, mac []byte, err error) {
	if len(pkt) < respMinLen || len(pkt) > respMaxLen || pkt[0] != typeResponse {
		return 0, nil, nil, nil, errMalformed
	}
	n := len(pkt) - macLen
	return binary.LittleEndian.Uint32(pkt[1:5]), pkt[1+idxLen : n], pkt[:n], pkt[n:], nil
}

// initPayload is the plaintext inside an initiation's Noise payload.
type initPayload struct {
	sender    uint32
	timestamp uint64 // initiator's clock, strictly increasing per peer pair
	blob      []byte
}

func (p initPayload) appendTo(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, p.sender)
	b = binary.LittleEndian.AppendUint64(b, p.timestamp)
	return append(b, p.blob...)
}

func decodeInitPayload(b []byte) (initPayload, error) {
	if len(b) < initPayloadHeader || len(b) > initPayloadHeader+MaxHandshakePayload {
		return initPayload{}, errMalformed
	}
	return initPayload{
		sender:    binary.LittleEndian.Uint32(b[0:4]),
		timestamp: binary.LittleEndian.Uint64(b[4:12]),
		blob:      b[initPayloadHeader:],
	}, nil
}

// respPayload is the plaintext inside a response's Noise payload.
type respPayload struct {
	sender uint32
	blob   []byte
}

func (p respPayload) appendTo(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, p.sender)
	return append(b, p.blob...)
}

func decodeRespPayload(b []byte) (respPayload, error) {
	if len(b) < respPayloadHeader || len(b) > respPayloadHeader+MaxHandshakePayload {
		return respPayload{}, errMalformed
	}
	return respPayload{sender: binary.LittleEndian.Uint32(b[0:4]), blob: b[respPayloadHeader:]}, nil
}

// mac1Key is the key of the MAC that ends every handshake message addressed
// to the holder of pub. Only someone who knows pub can produce it, so random
// datagrams are rejected with one hash instead of two Diffie-Hellman
// operations.
func mac1Key(pub Key) [32]byte { return labelledKey("scpsvpn mac1 v1", pub) }

// labelledKey is BLAKE2s-256(label || pub): a key tied to one use and one
// static public key.
func labelledKey(label string, pub Key) [32]byte {
	return blake2s.Sum256(append([]byte(label), pub[:]...))
}

func computeMAC1(key *[32]byte, msg []byte) [macLen]byte { return computeMAC(key[:], msg) }

// computeMAC is keyed BLAKE2s-128 of msg; key is 1..32 bytes.
func computeMAC(key, msg []byte) [macLen]byte {
	h, err := blake2s.New128(key)
	if err != nil {
		panic("peers: blake2s.New128 with a key of 1..32 bytes: " + err.Error())
	}
	h.Write(msg)
	var m [macLen]byte
	h.Sum(m[:0])
	return m
}

func checkMAC1(key *[32]byte, msg, mac []byte) bool {
	want := computeMAC1(key, msg)
	return subtle.ConstantTimeCompare(want[:], mac) == 1
}

func putLE32(b []byte, v uint32) { binary.LittleEndian.PutUint32(b, v) }
