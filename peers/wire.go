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

// Datagram kinds, the first byte of every datagram: the handshake
// messages by value; a transport datagram by its top bit (the rest of the
// byte is header fields, see below).
const (
	typeInitiation  byte = 1
	typeResponse    byte = 2
	typeCookieReply byte = 3
	transportBit    byte = 0x80
)

// The transport header: byte 0 is 1 c c i i i i i (c: counter code, i: the
// top 5 bits of the 13-bit receiver index), byte 1 the index's low 8 bits,
// then the counter, little-endian, in as many bytes as its code says.
// Code 0 is a keepalive, which carries no counter.
const (
	indexBits = 13
	indexMask = 1<<indexBits - 1
	// MaxIndices is how many receiver indices (sessions and outstanding
	// handshakes) a device can hold at once.
	MaxIndices     = 1 << indexBits
	counterShift   = 5
	transportFixed = 2 // byte 0 and the index's low byte
	// MaxCounter is the largest counter a transport datagram carries.
	MaxCounter = 1<<48 - 1
)

// counterLens is the counter's size by code.
var counterLens = [4]int{0, 3, 4, 6}

// counterCode is the code of the shortest form that holds counter.
func counterCode(counter uint64) byte {
	switch {
	case counter < 1<<24:
		return 1
	case counter < 1<<32:
		return 2
	}
	return 3
}

const (
	// TagLen is the ChaCha20-Poly1305 authentication tag.
	TagLen = 16
	// Overhead is the most Seal adds to an association packet (a counter
	// of 2^32 or more).
	Overhead = transportFixed + 6 + TagLen
	// keepaliveLen is a keepalive's whole datagram: header and tag.
	keepaliveLen = transportFixed + TagLen
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

// HeaderLen is the size of the transport header of a packet with counter
// counter; a caller may place the plaintext at dst[HeaderLen(counter):]
// before SealOn to encrypt in place.
func HeaderLen(counter uint64) int { return transportFixed + counterLens[counterCode(counter)] }

// OverheadFor is what SealOn adds to a packet with counter counter.
func OverheadFor(counter uint64) int { return HeaderLen(counter) + TagLen }

var errMalformed = errors.New("malformed")

// Nonce domains: an association packet's nonce holds its counter; a
// keepalive's is apart, so neither can ever take the other's.
const (
	domainData      = 0
	domainKeepalive = 1
)

// putNonce writes the 12-byte AEAD nonce: the domain (4 bytes) and the
// counter (8 bytes), little-endian.
func putNonce(n *[12]byte, domain uint32, counter uint64) {
	binary.LittleEndian.PutUint32(n[0:4], domain)
	binary.LittleEndian.PutUint64(n[4:12], counter)
}

// transportHeader is a decoded transport datagram.
type transportHeader struct {
	receiver  uint32 // the 13-bit receiver index
	keepalive bool
	counter   uint64
	header    []byte // the header bytes: the additional data
	sealed    []byte // ciphertext and tag
}

func decodeTransport(pkt []byte) (transportHeader, error) {
	if len(pkt) < transportFixed || pkt[0]&transportBit == 0 {
		return transportHeader{}, errMalformed
	}
	code := pkt[0] >> counterShift & 3
	hl := transportFixed + counterLens[code]
	if len(pkt) < hl+TagLen || code == 0 && len(pkt) != keepaliveLen {
		return transportHeader{}, errMalformed
	}
	h := transportHeader{
		receiver:  uint32(pkt[0]&0x1f)<<8 | uint32(pkt[1]),
		keepalive: code == 0,
		header:    pkt[:hl],
		sealed:    pkt[hl:],
	}
	for i := hl - 1; i >= transportFixed; i-- {
		h.counter = h.counter<<8 | uint64(pkt[i])
	}
	return h, nil
}

// putTransportHeader writes the header for a packet to receiver index
// receiver with counter counter (keepalive: no counter) and returns its
// length.
func putTransportHeader(b []byte, receiver uint32, counter uint64, keepalive bool) int {
	var code byte
	if !keepalive {
		code = counterCode(counter)
	}
	b[0] = transportBit | code<<counterShift | byte(receiver>>8&0x1f)
	b[1] = byte(receiver)
	n := counterLens[code]
	for i := range n {
		b[transportFixed+i] = byte(counter >> (8 * i))
	}
	return transportFixed + n
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
