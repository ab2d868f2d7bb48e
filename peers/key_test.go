package peers

import (
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/crypto/curve25519"
)

func mustHexKey(t testing.TB, s string) Key {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != KeyLen {
		t.Fatalf("bad hex key %q", s)
	}
	var k Key
	copy(k[:], b)
	return k
}

// RFC 7748 section 6.1.
func TestPublicKeyRFC7748(t *testing.T) {
	alicePriv := mustHexKey(t, "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
	alicePub := mustHexKey(t, "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")
	bobPriv := mustHexKey(t, "5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb")
	bobPub := mustHexKey(t, "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f")
	shared := mustHexKey(t, "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742")
	if got := alicePriv.PublicKey(); got != alicePub {
		t.Errorf("alice public key = %x, want %x", got, alicePub)
	}
	if got := bobPriv.PublicKey(); got != bobPub {
		t.Errorf("bob public key = %x, want %x", got, bobPub)
	}
	s1, err := curve25519.X25519(alicePriv[:], bobPub[:])
	if err != nil {
		t.Fatal(err)
	}
	s2, err := curve25519.X25519(bobPriv[:], alicePub[:])
	if err != nil {
		t.Fatal(err)
	}
	if Key(s1) != shared || Key(s2) != shared {
		t.Errorf("shared secrets %x / %x, want %x", s1, s2, shared)
	}
}

func TestKeyTextRoundTrip(t *testing.T) {
	for range 20 {
		priv, err := GeneratePrivateKey()
		if err != nil {
			t.Fatal(err)
		}
		if priv[0]&7 != 0 || priv[31]&128 != 0 || priv[31]&64 == 0 {
			t.Fatalf("private key %x not clamped", priv)
		}
		for _, k := range []Key{priv, priv.PublicKey()} {
			s := k.String()
			if len(s) != 44 {
				t.Fatalf("String() = %q: %d chars, want 44", s, len(s))
			}
			back, err := ParseKey(s)
			if err != nil || back != k {
				t.Fatalf("ParseKey(%q) = %x, %v; want %x", s, back, err, k)
			}
			var u Key
			txt, _ := k.MarshalText()
			if err := u.UnmarshalText(txt); err != nil || u != k {
				t.Fatalf("text round trip: %x, %v", u, err)
			}
		}
	}
	// The RFC key in WireGuard's text form.
	k := mustHexKey(t, "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")
	if got, want := k.String(), "hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo="; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestParseKeyRejects(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "0 characters, want 44"},
		{"hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTm==", "not standard base64"},
		{"hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo", "43 characters"},
		{"hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo==", "45 characters"},
		{"hSDwCYkwp1R0i33ctD73Wg2_Og0mOBr066SpjqqbTmo=", "not standard base64"}, // URL alphabet
		{"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "48 characters"},
		{"00000000000000000000000000000000000000000000", "decodes to 33 bytes"}, // no padding
		{"hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmp=", "not standard base64"}, // non-zero padding bits
	} {
		_, err := ParseKey(tc.in)
		if err == nil || !errors.Is(err, ErrBadKey) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseKey(%q) = %v, want error containing %q", tc.in, err, tc.want)
		}
	}
}

func TestLoadPrivateKeyFile(t *testing.T) {
	dir := t.TempDir()
	priv, _ := GeneratePrivateKey()
	good := filepath.Join(dir, "good.key")
	if err := os.WriteFile(good, []byte(priv.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := LoadPrivateKeyFile(good)
	if err != nil || got != priv {
		t.Fatalf("LoadPrivateKeyFile = %x, %v; want %x", got, err, priv)
	}

	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660, 0o602} {
		p := filepath.Join(dir, "open.key")
		if err := os.WriteFile(p, []byte(priv.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		_, err := LoadPrivateKeyFile(p)
		if err == nil || !strings.Contains(err.Error(), "chmod 600 "+p) {
			t.Errorf("mode %o: err = %v, want advice to chmod 600 %s", mode, err, p)
		}
	}

	bad := filepath.Join(dir, "bad.key")
	os.WriteFile(bad, []byte("not a key"), 0o600)
	if _, err := LoadPrivateKeyFile(bad); !errors.Is(err, ErrBadKey) {
		t.Errorf("bad content: %v, want ErrBadKey", err)
	}
	zero := filepath.Join(dir, "zero.key")
	os.WriteFile(zero, []byte(Key{}.String()), 0o600)
	if _, err := LoadPrivateKeyFile(zero); !errors.Is(err, ErrBadKey) {
		t.Errorf("zero key: %v, want ErrBadKey", err)
	}
	if _, err := LoadPrivateKeyFile(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}

	// Not a regular file: refused, and a FIFO does not hang the load.
	fifo := filepath.Join(dir, "fifo.key")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, dir} {
		if _, err := LoadPrivateKeyFile(p); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s: %v, want a not-a-regular-file error", p, err)
		}
	}
	// A symlink is followed: the file it names is what gets checked.
	link := filepath.Join(dir, "link.key")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadPrivateKeyFile(link); err != nil || got != priv {
		t.Errorf("symlink to a good key: %v", err)
	}
}

// The key must belong to the user that reads it (or root): checked on the
// opened file, so root can test it with chown.
func TestLoadPrivateKeyFileOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	dir := t.TempDir()
	priv, _ := GeneratePrivateKey()
	p := filepath.Join(dir, "other.key")
	if err := os.WriteFile(p, []byte(priv.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 54321, 54321); err != nil {
		t.Fatal(err)
	}
	_, err := LoadPrivateKeyFile(p)
	if err == nil || !strings.Contains(err.Error(), "owned by uid 54321") || !strings.Contains(err.Error(), "`chown root "+p+"`") {
		t.Errorf("key of another user: %v, want an owner error with chown advice", err)
	}
}

func TestCheckKeyFile(t *testing.T) {
	const reg = syscall.S_IFREG
	for _, c := range []struct {
		mode          uint32
		owner, reader int
		want          string // "" = accepted
	}{
		{reg | 0o600, 998, 998, ""},
		{reg | 0o400, 998, 998, ""},
		{reg | 0o600, 0, 998, ""}, // root's file, readable by us only if root let us
		{reg | 0o600, 0, 0, ""},
		{reg | 0o600, 1000, 998, "chown"},
		{reg | 0o600, 1000, 0, "chown"},
		{reg | 0o640, 998, 998, "chmod 600"},
		{reg | 0o604, 0, 0, "chmod 600"},
		{syscall.S_IFDIR | 0o700, 998, 998, "not a regular file"},
		{syscall.S_IFIFO | 0o600, 998, 998, "not a regular file"},
	} {
		err := checkKeyFile("k", c.mode, c.owner, c.reader)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("mode %o owner %d reader %d: %v, want %q", c.mode, c.owner, c.reader, err, c.want)
		}
	}
}

func FuzzParseKey(f *testing.F) {
	f.Add("hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo=")
	f.Add("")
	f.Add("====")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKey(s)
		if err != nil {
			return
		}
		if k.String() != s {
			t.Fatalf("ParseKey(%q) accepted a non-canonical form (%q)", s, k.String())
		}
	})
}
