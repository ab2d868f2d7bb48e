package linkemu

// This file owns the two TUN devices: creating each inside its network
// namespace (the device belongs to the namespace of the thread that opens
// /dev/net/tun, so the opening OS thread is switched into it and back),
// assigning addresses and bringing them up over netlink, and checking they
// are gone once closed (a non-persistent TUN disappears with its last fd).
//
// wireguard's tun.CreateTUN is used for its virtio-net offloads: one read
// returns a whole 64 KiB TSO segment split into MTU-sized packets and one
// write can carry a coalesced one, which is what lets a single core move
// more than a gigabit per second through the emulator.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"scpsvpn/cmd/internal/namespace"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/tun"
)

// New creates both TUN devices and configures them; Start begins forwarding.
func New(opts Options) (*Emulator, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	devA, err := openTUN(opts.NSA, opts.DevA, opts.mtu(), opts.AddrA)
	if err != nil {
		return nil, fmt.Errorf("linkemu: side A: %w", err)
	}
	devB, err := openTUN(opts.NSB, opts.DevB, opts.mtu(), opts.AddrB)
	if err != nil {
		devA.Close()
		return nil, fmt.Errorf("linkemu: side B: %w", err)
	}
	e := newEmulator(opts, devA, devB)
	e.afterClose = func() error {
		return errors.Join(waitGone(opts.NSA, opts.DevA), waitGone(opts.NSB, opts.DevB))
	}
	return e, nil
}

// tunDevice drains the device's event channel, which would otherwise block
// wireguard's netlink listener goroutine forever.
type tunDevice struct{ tun.Device }

func openTUN(ns, name string, mtu int, addrs []netip.Prefix) (device, error) {
	var dev tun.Device
	err := namespace.Do(ns, func() error {
		var err error
		dev, err = tun.CreateTUN(name, mtu)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("creating TUN %q in namespace %q: %w", name, ns, err)
	}
	go func() {
		for range dev.Events() {
		}
	}()
	if err := configure(ns, name, addrs); err != nil {
		dev.Close()
		return nil, err
	}
	return tunDevice{dev}, nil
}

// configure assigns addrs to the device and brings it up.
func configure(ns, name string, addrs []netip.Prefix) error {
	h, err := namespace.Netlink(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	link, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("finding %q in namespace %q: %w", name, ns, err)
	}
	for _, p := range addrs {
		a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if p.Addr().Is6() {
			a.Flags = unix.IFA_F_NODAD // usable at once; the link is point to point
		}
		if err := h.AddrAdd(link, a); err != nil {
			return fmt.Errorf("adding %s to %q: %w", p, name, err)
		}
	}
	// A longer device queue absorbs the kernel's bursts while the reader is
	// busy; the modem queue proper is the emulator's.
	if err := h.LinkSetTxQLen(link, 1000); err != nil {
		return fmt.Errorf("setting the queue length of %q: %w", name, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("bringing %q up: %w", name, err)
	}
	return nil
}

// waitGone waits until the device has left its namespace.
func waitGone(ns, name string) error {
	h, err := namespace.Netlink(ns)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // the namespace itself is gone
		}
		return err
	}
	defer h.Close()
	deadline := time.Now().Add(2 * time.Second)
	for {
		_, err := h.LinkByName(name)
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("TUN %q still present in namespace %q after close", name, ns)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
