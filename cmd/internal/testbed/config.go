package testbed

// This file owns what both topologies share about their endpoints
// (Endpoints) and what a testbed writes for them: one X25519 key pair per
// site (standard base64 of the 32 raw bytes, as WireGuard writes them; the
// private key file is mode 0600) and one configuration per site, described
// by a nodeConfig and written through configs.File, so it is the
// endpoint's own format by construction.

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"scpsvpn/configs"
)

// Endpoints describes what the endpoints of either topology (Config,
// StarConfig) share; zero fields take the defaults noted.
type Endpoints struct {
	Port     int    // UDP port of the association; default 4700
	Binary   string // endpoint binary for StartEndpoint, run as BINARY up --config FILE
	MTU      int    // [interface] mtu; default 1400
	LogLevel string // [interface] log_level; default "debug"

	Dir          string        // directory for keys, configs and logs; default a new temporary one
	KeepDir      bool          // keep Dir after Close (a directory given in Dir is never removed)
	StartTimeout time.Duration // StartEndpoint's wait for the TUN device; default 15s
	StopTimeout  time.Duration // StopEndpoint's wait before SIGKILL; default 10s
	Logger       *slog.Logger
}

func (e *Endpoints) defaults() {
	if e.Port == 0 {
		e.Port = 4700
	}
	if e.MTU == 0 {
		e.MTU = 1400
	}
	if e.LogLevel == "" {
		e.LogLevel = "debug"
	}
	if e.StartTimeout == 0 {
		e.StartTimeout = 15 * time.Second
	}
	if e.StopTimeout == 0 {
		e.StopTimeout = 10 * time.Second
	}
	if e.Logger == nil {
		e.Logger = slog.Default()
	}
}

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
	if err := os.MkdirAll(stateDirOf(path), 0o700); err != nil {
		return fmt.Errorf("site state_dir: %w", err)
	}
	return os.Chmod(path, 0o600) // WriteFile's mode is filtered by the umask
}

// stateDirOf is the state_dir of the site whose key is in keyFile: its
// own, beside the key, never the host's /var/lib/scpsvpn, which the sites
// on one machine would share.
func stateDirOf(keyFile string) string { return strings.TrimSuffix(keyFile, ".key") + "-state" }

// nodeConfig is what one endpoint's configuration says, in either
// topology.
type nodeConfig struct {
	Node       string // the site's name, for errors
	TUNName    string
	Listen     netip.AddrPort
	KeyFile    string
	TUN4, TUN6 netip.Addr
	Interface  string // extra raw TOML lines for [interface]
	Peers      []nodePeer
}

// nodePeer is one [[peer]] table.
type nodePeer struct {
	Name      string
	PublicKey string
	Endpoint  netip.AddrPort // invalid = no endpoint key
	Subnets   []netip.Prefix
	Link      string // raw TOML lines for [peer.link]; empty = no table
	Keys      string // extra raw TOML lines for the [[peer]] table itself
	Paths     []configs.Path
}

// file is n's configuration file. The raw lines are decoded into the
// tables they belong to, strictly: an unknown key is an error here, not
// when the endpoint starts; a key they set replaces the testbed's.
func (e *Endpoints) file(n nodeConfig) (configs.File, error) {
	f := configs.File{Interface: configs.Interface{
		Name:           n.TUNName,
		Listen:         n.Listen.String(),
		MTU:            e.MTU,
		PrivateKeyFile: n.KeyFile,
		Address:        []string{netip.PrefixFrom(n.TUN4, 32).String(), netip.PrefixFrom(n.TUN6, 128).String()},
		LogLevel:       e.LogLevel,
	}}
	if n.KeyFile != "" {
		f.Interface.StateDir = stateDirOf(n.KeyFile)
	}
	if err := decodeRaw(n.Interface, &f.Interface); err != nil {
		return f, fmt.Errorf("%s: the extra [interface] lines: %w", n.Node, err)
	}
	for _, p := range n.Peers {
		fp := configs.Peer{Name: p.Name, PublicKey: p.PublicKey, Paths: p.Paths}
		if p.Endpoint.IsValid() {
			fp.Endpoint = p.Endpoint.String()
		}
		for _, s := range p.Subnets {
			fp.Subnets = append(fp.Subnets, s.String())
		}
		if err := decodeRaw(p.Keys, &fp); err != nil {
			return f, fmt.Errorf("%s: the [[peer]] lines of peer %s: %w", n.Node, p.Name, err)
		}
		if err := decodeRaw(p.Link, &fp.Link); err != nil {
			return f, fmt.Errorf("%s: the [peer.link] lines of peer %s: %w", n.Node, p.Name, err)
		}
		f.Peers = append(f.Peers, fp)
	}
	return f, nil
}

// decodeRaw decodes TOML lines into the table v, which keeps the keys
// they do not set.
func decodeRaw(raw string, v any) error {
	if strings.TrimSpace(raw) == "" {
		return nil
	}
	dec := toml.NewDecoder(bytes.NewReader([]byte(raw)))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) && len(strict.Errors) > 0 {
		return fmt.Errorf("%q: unknown key %q", raw, strings.Join(strict.Errors[0].Key(), "."))
	}
	if err != nil {
		return fmt.Errorf("%q: %w", raw, err)
	}
	return nil
}

// writeConfig writes n's configuration to path.
func (e *Endpoints) writeConfig(path string, n nodeConfig) error {
	f, err := e.file(n)
	if err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	if err := f.WriteFile(path); err != nil {
		return fmt.Errorf("testbed: %s: %w", n.Node, err)
	}
	return nil
}
