// This file owns the Stack's configuration: the knobs the tunnel sets, their
// defaults, and the validation that names what is wrong.

package stack

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults applied by Config.withDefaults when a field is zero.
const (
	// DefaultMaxFlows caps concurrent TCP connections. Each flow costs two
	// gVisor endpoints' buffers (one per leg, up to a few MiB when a leg is
	// stalled) and a few goroutines in the tunnel; 4096 covers a busy site
	// while bounding memory.
	DefaultMaxFlows = 4096

	// DefaultMaxInFlight bounds handshakes between SYN and Accept/Refuse. On a
	// LAN leg a handshake completes in well under a millisecond, so this only
	// matters in SYN storms; each in-flight request holds a goroutine.
	DefaultMaxInFlight = 512

	// DefaultOutQueueLen is the number of outbound packets the link endpoint
	// buffers for its writer goroutine. It absorbs a TCP burst of several
	// flows while the writer is inside Output. Worst case memory is
	// OutQueueLen * (Headroom + max(MTU, 16 KiB, GSOMaxSize)), 16 MiB,
	// when all are data packets; ACKs use 256-byte buffers. (The tunnel
	// sends 63 KiB segments through half as long a queue: 32 MiB.)
	DefaultOutQueueLen = 1024

	// DefaultOutBlockTimeout is how long gVisor's TCP goroutines may wait for
	// queue space before the packet is dropped. The writer frees space every
	// batch (microseconds); only a stuck Output takes this long. A busy
	// 2-core machine can leave the writer unscheduled for 100 ms, and a
	// dropped window update then costs a zero-window probe backoff, so the
	// bound is a second.
	DefaultOutBlockTimeout = time.Second

	// Headroom is the number of bytes reserved before each packet handed to
	// Output. wireguard's tun.Device.Write needs at least 10 for its
	// virtio-net header (and so does GSO, Config.GSOMaxSize).
	Headroom = 16

	// MaxBatch is the largest number of packets in one Output call; it matches
	// wireguard's tun BatchSize.
	MaxBatch = 128

	// groRoom is the capacity given to outbound data buffers so that
	// wireguard's tun.Write can merge later segments of the same flow into
	// them (GRO); see link.go.
	groRoom = 16 << 10
	// smallPacket is the size class for ACKs, SYNs and RSTs (IPv6 + TCP
	// with SACK blocks fit in well under 256 bytes).
	smallPacket = 256

	minMTU = 1280 // IPv6 minimum link MTU; the stack carries both families.
	maxMTU = 65535
)

// Config configures a Stack. Zero values of the optional fields select the
// defaults above.
type Config struct {
	// MTU is the link MTU of the TUN (e.g. 1400), for IPv4 and IPv6.
	MTU int
	// MaxFlows caps concurrent forwarded plus dialed TCP connections. SYNs
	// beyond it are answered with RST and counted; dials fail with
	// ErrFlowLimit.
	MaxFlows int
	// MaxInFlight caps forwarded handshakes not yet accepted or refused.
	// gVisor drops SYNs beyond it silently (the client retries after its
	// SYN timeout); Stats.InFlightDrops counts them. With optimistic open a
	// request lives for a LAN round trip; a tunnel that accepts only after
	// the far side connected should size it to its connection rate times
	// the satellite round trip.
	MaxInFlight int
	// HandleTCP is called for each new inbound TCP connection (SYN), possibly
	// concurrently. It must not block for long and must eventually call
	// Accept or Refuse on the request. Nil refuses every inbound connection.
	HandleTCP func(req *TCPRequest)
	// Output writes IP packets to the TUN: each bufs[i][offset:] is one IP
	// packet, with offset == Headroom bytes before it. It is called from one
	// goroutine with up to MaxBatch packets; it must not retain bufs.
	Output func(bufs [][]byte, offset int) error
	// Logger receives stage start/stop and error reports; nil uses
	// slog.Default().
	Logger *slog.Logger

	// OutQueueLen is the capacity of the outbound packet queue.
	OutQueueLen int
	// OutBlockTimeout is how long a full queue may block gVisor before a
	// packet is dropped and counted.
	OutBlockTimeout time.Duration
	// TrustRXChecksums skips TCP/IP checksum verification of injected
	// packets. Set it only when every packet comes from the local kernel
	// through the TUN and the caller checked the TCP checksums the kernel
	// did not vouch for (the kernel checks none of a packet it forwards or
	// a raw socket sends; the endpoint does, tunnel's routeFromTUN), never
	// for packets that crossed a wire unchecked.
	TrustRXChecksums bool
	// GSOMaxSize, when non-zero, lets the stack's TCP send segments of up to
	// this many bytes (at most 65535) that the kernel cuts into MSS-sized
	// packets (TSO through a TUN opened with IFF_VNET_HDR and TSO offloads):
	// the stack's TCP costs per segment, so this cuts its sending cost many
	// times over. Output must then write each packet with the 10-byte
	// virtio-net header the stack puts right before it,
	// bufs[i][offset-VirtioNetHdrLen:]: the header says how to segment the
	// packet and that its TCP checksum is still to be completed.
	GSOMaxSize int
	// BufferMemory bounds the TCP endpoints' buffers together (budget.go);
	// 0 = no bound beyond each buffer's own maximum.
	BufferMemory int64
}

// VirtioNetHdrLen is the size of Linux's struct virtio_net_hdr, which the
// stack writes before every packet when Config.GSOMaxSize is set.
const VirtioNetHdrLen = 10

// Validate reports the first thing wrong with c.
func (c *Config) Validate() error {
	switch {
	case c.MTU < minMTU || c.MTU > maxMTU:
		return fmt.Errorf("stack: MTU %d out of range [%d, %d]", c.MTU, minMTU, maxMTU)
	case c.Output == nil:
		return errors.New("stack: Output must be set")
	case c.MaxFlows < 0:
		return fmt.Errorf("stack: MaxFlows %d is negative", c.MaxFlows)
	case c.MaxInFlight < 0:
		return fmt.Errorf("stack: MaxInFlight %d is negative", c.MaxInFlight)
	case c.OutQueueLen < 0:
		return fmt.Errorf("stack: OutQueueLen %d is negative", c.OutQueueLen)
	case c.BufferMemory < 0:
		return fmt.Errorf("stack: BufferMemory %d is negative", c.BufferMemory)
	case c.OutBlockTimeout < 0:
		return fmt.Errorf("stack: OutBlockTimeout %v is negative", c.OutBlockTimeout)
	case c.GSOMaxSize < 0 || c.GSOMaxSize > maxMTU:
		return fmt.Errorf("stack: GSOMaxSize %d out of range [0, %d]", c.GSOMaxSize, maxMTU)
	}
	return nil
}

// withDefaults returns a copy of c with zero optional fields defaulted.
func (c Config) withDefaults() Config {
	if c.MaxFlows == 0 {
		c.MaxFlows = DefaultMaxFlows
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = min(DefaultMaxInFlight, c.MaxFlows)
	}
	if c.OutQueueLen == 0 {
		c.OutQueueLen = DefaultOutQueueLen
	}
	if c.OutBlockTimeout == 0 {
		c.OutBlockTimeout = DefaultOutBlockTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}
