package testbed

// This file owns what a testbed writes for its endpoints: one X25519 key
// pair per site (standard base64 of the 32 raw bytes, as WireGuard writes
// them; the private key file is mode 0600) and one TOML configuration per
// site in the format the scpsvpn endpoint reads.

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// keyPair makes an X25519 key pair, both base64.
func keyPair() (private, public string, err error) {
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("generating an X25519 key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(k.Bytes()), base64.StdEncoding.EncodeToString(k.PublicKey().Bytes()), nil
}

// PublicKeyOf derives the base64 public key of a base64 X25519 private key.
func PublicKeyOf(private string) (string, error) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(private))
	if err != nil {
		return "", fmt.Errorf("private key is not base64: %w", err)
	}
	k, err := ecdh.X25519().NewPrivateKey(raw)
	if err != nil {
		return "", fmt.Errorf("private key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(k.PublicKey().Bytes()), nil
}

// writeKey writes a private key file readable by its owner only.
func writeKey(path, private string) error {
	if err := os.WriteFile(path, []byte(private+"\n"), 0o600); err != nil {
		return fmt.Errorf("writing key %s: %w", path, err)
	}
	return os.Chmod(path, 0o600) // WriteFile's mode is filtered by the umask
}

// quote writes s as a TOML basic string.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func quoteList[T fmt.Stringer](items []T) string {
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = quote(it.String())
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// configParams are the inputs of one site's configuration.
type configParams struct {
	Self, Peer   *Site
	Port         int
	MTU          int
	LogLevel     string
	WithEndpoint bool   // the peer entry carries the peer's UDP endpoint
	Interface    string // extra raw TOML lines for [interface]
	PeerLink     string // raw TOML lines for [peer.link]; empty = no table
}

// renderConfig returns the endpoint configuration of p.Self, checked to be
// valid TOML (the raw lines come from callers).
func renderConfig(p configParams) ([]byte, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# scpsvpn endpoint of %s, written by the testbed\n", p.Self.Name)
	b.WriteString("[interface]\n")
	fmt.Fprintf(&b, "name = %s\n", quote(p.Self.TUNName))
	fmt.Fprintf(&b, "listen = %s\n", quote(netip.AddrPortFrom(p.Self.Underlay.Addr(), uint16(p.Port)).String()))
	fmt.Fprintf(&b, "mtu = %d\n", p.MTU)
	fmt.Fprintf(&b, "private_key_file = %s\n", quote(p.Self.KeyFile))
	fmt.Fprintf(&b, "address = %s\n", quoteList([]netip.Prefix{
		netip.PrefixFrom(p.Self.TUN4, 32), netip.PrefixFrom(p.Self.TUN6, 128)}))
	fmt.Fprintf(&b, "log_level = %s\n", quote(p.LogLevel))
	writeRaw(&b, p.Interface)
	b.WriteString("\n[[peer]]\n")
	fmt.Fprintf(&b, "name = %s\n", quote(p.Peer.Name))
	fmt.Fprintf(&b, "public_key = %s\n", quote(p.Peer.PublicKey))
	if p.WithEndpoint {
		fmt.Fprintf(&b, "endpoint = %s\n", quote(netip.AddrPortFrom(p.Peer.Underlay.Addr(), uint16(p.Port)).String()))
	}
	fmt.Fprintf(&b, "subnets = %s\n", quoteList([]netip.Prefix{p.Peer.LAN4, p.Peer.LAN6}))
	if strings.TrimSpace(p.PeerLink) != "" {
		b.WriteString("\n[peer.link]\n")
		writeRaw(&b, p.PeerLink)
	}
	out := []byte(b.String())
	var check map[string]any
	if err := toml.Unmarshal(out, &check); err != nil {
		return nil, fmt.Errorf("the configuration of %s is not valid TOML (check the extra lines): %w\n%s", p.Self.Name, err, numbered(out))
	}
	return out, nil
}

func writeRaw(b *strings.Builder, raw string) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return
	}
	b.WriteString(raw)
	b.WriteByte('\n')
}

func numbered(text []byte) string {
	var b strings.Builder
	for i, line := range strings.Split(strings.TrimRight(string(text), "\n"), "\n") {
		b.WriteString(strconv.Itoa(i + 1))
		b.WriteString(": ")
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}
