// key.go owns the X25519 identity keys: generation, public key derivation,
// the WireGuard-style base64 text form and loading a private key file with an
// owner and permission check.

package peers

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"syscall"

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

// maxKeyFile bounds what LoadPrivateKeyFile reads: a key is 44 characters.
const maxKeyFile = 4096

// LoadPrivateKeyFile reads a base64 private key from path. The checks are
// made on the opened file (fstat), so a file swapped in after a check
// cannot slip through: it must be a regular file, owned by the user reading
// it (or by root), and not readable or writable by group or others. A leaked
// private key lets anyone impersonate this site, and a key some other user
// can replace lets that user become this site.
func LoadPrivateKeyFile(path string) (Key, error) {
	// O_NONBLOCK: a FIFO at the path must not hang start-up.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return Key{}, fmt.Errorf("private key file: %w: it must be owned by the user scpsvpn runs as (%s): run `chown %s %s`",
				err, userName(os.Geteuid()), chownName(os.Geteuid()), path)
		}
		return Key{}, fmt.Errorf("private key file: %w", err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return Key{}, fmt.Errorf("private key file %s: %w", path, err)
	}
	if err := checkKeyFile(path, st.Mode, int(st.Uid), os.Geteuid()); err != nil {
		return Key{}, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile))
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

// checkKeyFile applies the rules of LoadPrivateKeyFile to an opened file's
// mode and owner, read by user reader.
func checkKeyFile(path string, mode uint32, owner, reader int) error {
	if mode&syscall.S_IFMT != syscall.S_IFREG {
		return fmt.Errorf("private key file %s is not a regular file", path)
	}
	if owner != reader && owner != 0 {
		return fmt.Errorf("private key file %s is owned by %s, but scpsvpn runs as %s, and only it or root may own the key: run `chown %s %s`",
			path, userName(owner), userName(reader), chownName(reader), path)
	}
	if perm := mode & 0o777; perm&0o077 != 0 {
		return fmt.Errorf("private key file %s is accessible by group or others (mode %04o): run `chmod 600 %s`", path, perm, path)
	}
	return nil
}

// userName names a uid for messages: "scpsvpn (uid 998)", or "uid 998".
func userName(uid int) string {
	if n := chownName(uid); n != strconv.Itoa(uid) {
		return fmt.Sprintf("%s (uid %d)", n, uid)
	}
	return fmt.Sprintf("uid %d", uid)
}

// chownName is what chown takes for uid: its user name, else the number.
func chownName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}
