package tunnel

// Status: a snapshot of the endpoint (peers, associations, counters) served
// as JSON on a unix socket beside the TUN's name, for `scpsvpn status`.
// The socket is root-only (0600 in a 0700 directory): counters reveal peers'
// addresses and traffic.

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"scpsvpn/peers"
	"scpsvpn/scps"
)

// StatusDir holds one control socket per running endpoint.
var StatusDir = "/run/scpsvpn"

// StatusSocket is the control socket path of the endpoint with TUN name.
func StatusSocket(name string) string { return filepath.Join(StatusDir, name+".sock") }

// Status is what `scpsvpn status` prints.
type Status struct {
	Interface string       `json:"interface"`
	Listen    string       `json:"listen"`
	PublicKey string       `json:"public_key"`
	Instance  string       `json:"instance"`
	Uptime    string       `json:"uptime"`
	Counters  Counters     `json:"counters"`
	Security  peers.Stats  `json:"security"`
	Peers     []PeerStatus `json:"peers"`
}

// Counters is the endpoint's Stats as plain numbers.
type Counters struct {
	TunPackets      uint64 `json:"tun_packets"`
	TunNoPeer       uint64 `json:"tun_no_peer"`
	TunMalformed    uint64 `json:"tun_malformed"`
	DatagramsIn     uint64 `json:"datagrams_in"`
	DatagramsBadSrc uint64 `json:"datagrams_bad_src"`
	UDPIn           uint64 `json:"udp_in"`
	UDPDropped      uint64 `json:"udp_dropped"`
	FlowsOpened     uint64 `json:"flows_opened"`
	FlowsAccepted   uint64 `json:"flows_accepted"`
	FlowsRefused    uint64 `json:"flows_refused"`
	FlowsActive     int64  `json:"flows_active"`
}

// PeerStatus is one peer and its association.
type PeerStatus struct {
	Name          string     `json:"name"`
	Endpoint      string     `json:"endpoint,omitempty"`
	Up            bool       `json:"up"`
	LastHandshake time.Time  `json:"last_handshake,omitzero"`
	Subnets       []string   `json:"subnets"`
	Association   scps.Stats `json:"association"`
}

// Status takes a snapshot.
func (e *Endpoint) Status() Status {
	s := &e.stats
	pub := e.dev.PublicKey()
	st := Status{
		Interface: e.cfg.Name,
		Listen:    e.sock.LocalAddr().String(),
		PublicKey: pub.String(),
		Instance:  fmt.Sprintf("%016x", e.instance),
		Uptime:    time.Since(e.started).Round(time.Second).String(),
		Counters: Counters{
			TunPackets: s.TunPackets.Load(), TunNoPeer: s.TunNoPeer.Load(), TunMalformed: s.TunMalformed.Load(),
			DatagramsIn: s.DatagramsIn.Load(), DatagramsBadSrc: s.DatagramsBadSrc.Load(),
			UDPIn: s.UDPIn.Load(), UDPDropped: s.UDPDropped.Load(),
			FlowsOpened: s.FlowsOpened.Load(), FlowsAccepted: s.FlowsAccepted.Load(),
			FlowsRefused: s.FlowsRefused.Load(), FlowsActive: s.FlowsActive.Load(),
		},
		Security: e.dev.Stats(),
	}
	e.mu.Lock()
	as := make([]*assoc, 0, len(e.assocs))
	for _, a := range e.cfg.Peers {
		if x := e.assocs[a.Name]; x != nil {
			as = append(as, x)
		}
	}
	e.mu.Unlock()
	for _, a := range as {
		ps := PeerStatus{Name: a.cfg.Name, Association: a.session().Stats()}
		ps.Up = a.up.Load()
		if p, ok := e.dev.Peer(a.cfg.Name); ok {
			if ep := p.Endpoint(); ep.IsValid() {
				ps.Endpoint = ep.String()
			}
			ps.LastHandshake = p.LastHandshake()
		}
		for _, sn := range a.cfg.Subnets {
			ps.Subnets = append(ps.Subnets, sn.String())
		}
		st.Peers = append(st.Peers, ps)
	}
	return st
}

// serveStatus answers each connection on the control socket with one JSON
// status document.
func (e *Endpoint) serveStatus() (func(), error) {
	if err := os.MkdirAll(StatusDir, 0o700); err != nil {
		return nil, fmt.Errorf("status socket dir: %w", err)
	}
	path := StatusSocket(e.cfg.Name)
	_ = os.Remove(path) // a stale socket from a killed run
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("status socket: %w", err)
	}
	_ = os.Chmod(path, 0o600)
	e.goLoop("status", func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			_ = json.NewEncoder(c).Encode(e.Status())
			c.Close()
		}
	})
	return func() { ln.Close(); os.Remove(path) }, nil
}

// ReadStatus fetches the status of the endpoint with TUN name.
func ReadStatus(name string) (*Status, error) {
	c, err := net.DialTimeout("unix", StatusSocket(name), 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("no endpoint %q running here (%w)", name, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var st Status
	if err := json.NewDecoder(c).Decode(&st); err != nil {
		return nil, fmt.Errorf("read status of %q: %w", name, err)
	}
	return &st, nil
}
