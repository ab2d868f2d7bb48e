package peers

import (
	"crypto/rand"
	"encoding/binary"
	"testing"
)

// countingReader yields next, next+1, ... as little-endian 32-bit words
// and counts the bytes read.
type countingReader struct {
	next uint32
	read int
}

func (r *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		if i%4 == 0 && len(p)-i >= 4 {
			binary.LittleEndian.PutUint32(p[i:], r.next)
			r.next++
		}
	}
	r.read += len(p)
	return len(p), nil
}

// TestReceiverIndexFromCryptoRand: receiver indices come from crypto/rand
// (the handshake relies on them being unguessable), not from a generator
// seeded in the process.
func TestReceiverIndexFromCryptoRand(t *testing.T) {
	_, a, _ := pair(t, Options{})
	r := &countingReader{next: 0x5eed0001}
	saved := rand.Reader
	rand.Reader = r
	idx, ok := a.dev.allocIndex(indexEntry{})
	rand.Reader = saved
	if !ok {
		t.Fatal("no index allocated")
	}
	if r.read == 0 || idx != 0x5eed0001 {
		t.Errorf("index %#x after %d bytes of crypto/rand, want %#x from it", idx, r.read, 0x5eed0001)
	}
}
