package tunnel

// The endpoint needs CAP_NET_ADMIN and nothing else (the packaged unit runs
// it as its own user with that one capability): TUN, addresses, routes,
// forced socket buffer sizes. A non-root user also needs to open the TUN
// clone device, which distributions make mode 0666; this names it when it
// is the reason the TUN could not be made.

import "golang.org/x/sys/unix"

const tunDevice = "/dev/net/tun"

// tunDeviceHint returns advice when this user cannot open the TUN device.
func tunDeviceHint() string {
	if unix.Access(tunDevice, unix.R_OK|unix.W_OK) != nil {
		return ", and " + tunDevice + " must be readable and writable by this user: distributions make it mode 0666"
	}
	return ""
}
