package tunnel

// Reading a TUN with offloads without splitting: with IFF_VNET_HDR and TSO
// on (wireguard's tun turns them on), one read returns a virtio-net header
// and up to 64 KB that the kernel's TCP sent as one segment. wireguard's
// tun.Read cuts such a segment into MTU-sized packets (a copy and a
// checksum each), which the stack's GRO then merges again. The stack's TCP
// takes the segment whole, so readTUNOffload hands it over as one packet:
// one copy, one parse and one delivery per 64 KB instead of ~45.

import (
	"encoding/binary"
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/tun"

	"scpsvpn/stack"
)

// Linux's virtio-net header values (include/uapi/linux/virtio_net.h).
const (
	vnetNeedsCsum = 1 // flags: the checksum at csum_start+csum_offset is partial
	vnetDataValid = 2 // flags: the kernel (or the NIC for it) checked the checksums
	vnetGSONone   = 0
	vnetGSOTCPv4  = 1
	vnetGSOTCPv6  = 4
	protoUDP      = 17
)

var (
	errVnetShort = errors.New("TUN read shorter than its virtio-net header")
	errVnetGSO   = errors.New("TUN read: segmentation type not enabled")
	errVnetCsum  = errors.New("TUN read: checksum position outside the packet")
)

// offloadFile returns the file of a TUN read with virtio-net headers (a
// wireguard NativeTun with offloads on), nil for any other device. It also
// turns UDP segmentation off, so that every large segment the kernel hands
// over is TCP: a UDP one would have to be cut into datagrams here, and the
// kernel does that itself when not allowed to pass it on.
func offloadFile(d TUN) *os.File {
	nt, ok := d.(*tun.NativeTun)
	if !ok || nt.BatchSize() <= 1 {
		return nil
	}
	f := nt.File()
	sc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	var ioErr error
	if err := sc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetInt(int(fd), unix.TUNSETOFFLOAD, unix.TUN_F_CSUM|unix.TUN_F_TSO4|unix.TUN_F_TSO6)
	}); err != nil || ioErr != nil {
		return nil
	}
	return f
}

// vnetPacket returns the IP packet of one read from a TUN with virtio-net
// headers, and whether the kernel vouched for its transport checksum: it
// checked it (DATA_VALID, a NIC's checksum offload), or the packet is its
// own, with a partial checksum it would complete on the wire (NEEDS_CSUM).
// A TCP segment comes whole, however large, and with its TCP checksum left
// partial when the kernel says so: it goes only to the stack, which trusts
// the checksums it is given (stack.Config.TrustRXChecksums) once the
// endpoint checked those the kernel did not vouch for (routeFromTUN). Any
// other packet may go on to a peer, so a partial checksum is completed
// here. The packet is b's own bytes.
func vnetPacket(b []byte) (pkt []byte, vouched bool, err error) {
	if len(b) < stack.VirtioNetHdrLen {
		return nil, false, errVnetShort
	}
	flags, gso := b[0], b[1]
	vouched = flags&(vnetNeedsCsum|vnetDataValid) != 0
	ne := binary.NativeEndian
	start, off := int(ne.Uint16(b[6:])), int(ne.Uint16(b[8:]))
	pkt = b[stack.VirtioNetHdrLen:]
	info, ok := parseIP(pkt)
	switch {
	case !ok:
		return nil, false, errMalformedIP
	case gso == vnetGSOTCPv4 || gso == vnetGSOTCPv6:
		if info.proto != protoTCP {
			return nil, false, errVnetGSO
		}
		return pkt, vouched, nil
	case gso != vnetGSONone:
		return nil, false, errVnetGSO
	case flags&vnetNeedsCsum == 0 || info.proto == protoTCP:
		return pkt, vouched, nil
	}
	at := start + off
	// The sum covers the transport header and its payload: a start inside
	// the IP header would write the sum over the header itself.
	if start < info.hlen || start >= len(pkt) || at+2 > len(pkt) || at < start {
		return nil, false, errVnetCsum
	}
	// The field holds the pseudo-header's sum, which the sum folds in.
	initial := binary.BigEndian.Uint16(pkt[at:])
	pkt[at], pkt[at+1] = 0, 0
	sum := ^checksum(pkt[start:], initial)
	if sum == 0 && info.proto == protoUDP {
		sum = 0xffff // 0 means "no checksum" in UDP
	}
	binary.BigEndian.PutUint16(pkt[at:], sum)
	return pkt, true, nil
}

var errMalformedIP = errors.New("TUN read: not an IP packet")

// readTUNOffload is readTUN for a TUN read through f with virtio-net
// headers: one packet per read, a TCP segment of up to 64 KB whole.
func (e *Endpoint) readTUNOffload(f *os.File) {
	buf := make([]byte, stack.VirtioNetHdrLen+65535)
	for {
		n, err := f.Read(buf)
		if err != nil {
			if errors.Is(err, syscall.EBADFD) {
				err = os.ErrClosed
			}
			if !errors.Is(err, os.ErrClosed) && e.ctx.Err() == nil {
				e.log.Error("TUN read", "err", err)
			}
			return
		}
		pkt, vouched, err := vnetPacket(buf[:n])
		if err != nil {
			e.stats.TunPackets.Add(1)
			e.stats.TunMalformed.Add(1)
			continue
		}
		if e.routeFromTUN(pkt, vouched) {
			e.stk.Inject(pkt)
		}
	}
}
