// key.go owns the X25519 identity keys: generation, public key derivation,
// the WireGuard-style base64 text form and loading a private key file with a
// permission check.

package peers

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"os"

	"golang.org/x/crypto/curve25519"
)

// KeyLen is the length of an X25519 key in bytes.
const KeyLen = 32

// Key is an X25519 private or public key. Its text form is standard base64
// (44 characters), the same as WireGuard's, so keys can be pasted between
// tools.
type Key [KeyLen]byte

// ErrBadKey is wrapped by every key parsing failure.
var ErrBadKey = errors.New("bad key")

// GeneratePrivateKey returns a new random, clamped X25519 private key.
func GeneratePrivateKey() (Key, error) {
	var k Key
	if _, err := rand.Read(k[:]); err != nil {
		return Key{}, fmt.Errorf("generate private key: %w", err)
	}
	// Clamp as RFC 7748 section 5 does; X25519 clamps again internally, but a
	// stored clamped key is what other tools (wg) print as well.
	k[0] &= 248
	k[31] = (k[31] & 127) | 64
	return k, nil
}

// PublicKey derives the public key of private key k.
func (k Key) PublicKey() Key {
	var pub Key
	// X25519 with the base point cannot produce the all-zero output, so the
	// error is impossible here.
	out, err := curve25519.X25519(k[:], curve25519.Basepoint)
	if err != nil {
		panic("peers: X25519 with base point failed: " + err.Error())
	}
	copy(pub[:], out)
	return pub
}

// IsZero reports whether k is all zeros (an unset key).
func (k Key) IsZero() bool {
	var zero Key
	return subtle.ConstantTimeCompare(k[:], zero[:]) == 1
}

// String returns the standard base64 form of k (44 characters).
func (k Key) String() string {
	return base64.StdEncoding.EncodeToString(k[:])
}

// MarshalText implements encoding.TextMarshaler with the base64 form.
func (k Key) MarshalText() ([]byte, error) {
	return []byte(k.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseKey.
func (k *Key) UnmarshalText(b []byte) error {
	parsed, err := ParseKey(string(b))
	if err != nil {
		return err
	}
	*k = parsed
	return nil
}

// less orders keys bytewise; it breaks ties when both peers initiate at once.
func (k Key) less(o Key) bool {
	return bytes.Compare(k[:], o[:]) < 0
}

// ParseKey parses the standard base64 form of a key (as printed by
// `scpsvpn genkey`, `scpsvpn pubkey` or `wg`).
func ParseKey(s string) (Key, error) {
	var k Key
	if len(s) != base64.StdEncoding.EncodedLen(KeyLen) {
		return k, fmt.Errorf("%w: %d characters, want %d (standard base64 of %d bytes, as printed by `scpsvpn genkey`)",
			ErrBadKey, len(s), base64.StdEncoding.EncodedLen(KeyLen), KeyLen)
	}
	// 44 characters without padding decode to 33 bytes: decode into a
	// buffer of that size, then insist on exactly 32.
	var buf [KeyLen + 1]byte
	n, err := base64.StdEncoding.Strict().Decode(buf[:], []byte(s))
	if err != nil {
		return Key{}, fmt.Errorf("%w: not standard base64: %v", ErrBadKey, err)
	}
	if n != KeyLen {
		return Key{}, fmt.Errorf("%w: decodes to %d bytes, want %d", ErrBadKey, n, KeyLen)
	}
	copy(k[:], buf[:KeyLen])
	return k, nil
}

// LoadPrivateKeyFile reads a base64 private key from path. It refuses files
// that group or others may read or write: a leaked private key lets anyone
// impersonate this site.
func LoadPrivateKeyFile(path string) (Key, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Key{}, fmt.Errorf("private key file: %w", err)
	}
	if fi.IsDir() {
		return Key{}, fmt.Errorf("private key file %s is a directory", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return Key{}, fmt.Errorf("private key file %s is accessible by group or others (mode %04o): run `chmod 600 %s`", path, perm, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Key{}, fmt.Errorf("private key file: %w", err)
	}
	k, err := ParseKey(string(bytes.TrimSpace(b)))
	if err != nil {
		return Key{}, fmt.Errorf("private key file %s: %w", path, err)
	}
	if k.IsZero() {
		return Key{}, fmt.Errorf("private key file %s: %w: all zeros", path, ErrBadKey)
	}
	return k, nil
}
