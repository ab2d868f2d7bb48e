package testbed

// A stand-in for the scpsvpn endpoint, so StartEndpoint and StopEndpoint are
// tested before the real one exists: the test binary itself, run as
// `BINARY up --config FILE`, reads the configuration, checks its key, creates
// and brings up the TUN named there with its addresses, binds the
// association's UDP address and waits for SIGTERM/SIGINT. A file beside the
// configuration (FILE.fake, see writeFake) makes it misbehave on purpose:
// fake_exit = N exits with N at once; fake_ignore_term = true ignores
// SIGTERM.

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/tun"
)

func TestMain(m *testing.M) {
	if len(os.Args) == 4 && os.Args[1] == "up" && os.Args[2] == "--config" {
		os.Exit(fakeEndpoint(os.Args[3]))
	}
	if os.Getenv("TESTBED_ORPHAN_HELPER") == "1" {
		os.Exit(orphanHelper())
	}
	os.Exit(m.Run())
}

// orphanHelper builds a testbed with a running endpoint, reports it on
// stdout and waits to be killed: TestKilledProcessLeavesNothing checks
// what a SIGKILL leaves behind.
func orphanHelper() int {
	exe, err := os.Executable()
	if err != nil {
		return 1
	}
	tb, err := New(Config{Kind: Emulated, Endpoints: Endpoints{Binary: exe, Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	if err := tb.StartEndpoint(A); err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	fmt.Println("READY", tb.PID(A), tb.A.NS, tb.B.NS)
	select {}
}

type fakeConfig struct {
	Interface struct {
		Name           string   `toml:"name"`
		Listen         string   `toml:"listen"`
		MTU            int      `toml:"mtu"`
		PrivateKeyFile string   `toml:"private_key_file"`
		Address        []string `toml:"address"`
	} `toml:"interface"`
}

// fakeOrders is what FILE.fake tells the fake endpoint: the testbed writes
// only what the real endpoint reads, so the misbehaviour comes beside it.
type fakeOrders struct {
	FakeExit       int  `toml:"fake_exit"`
	FakeIgnoreTerm bool `toml:"fake_ignore_term"`
}

// writeFake gives the fake endpoint of configuration file config its orders.
func writeFake(t *testing.T, config string, o fakeOrders) {
	t.Helper()
	data, err := toml.Marshal(o)
	if err == nil {
		err = os.WriteFile(config+".fake", data, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func fakeEndpoint(path string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "fake endpoint: "+format+"\n", a...)
		return 1
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fail("%v", err)
	}
	var cfg fakeConfig
	if err := toml.Unmarshal(data, &cfg); err != nil {
		return fail("config: %v", err)
	}
	ifc := cfg.Interface
	var orders fakeOrders
	if data, err := os.ReadFile(path + ".fake"); err == nil {
		if err := toml.Unmarshal(data, &orders); err != nil {
			return fail("orders: %v", err)
		}
	}
	if orders.FakeExit != 0 {
		fmt.Fprintf(os.Stderr, "fake endpoint: failing on purpose with %d\n", orders.FakeExit)
		return orders.FakeExit
	}
	key, err := os.ReadFile(ifc.PrivateKeyFile)
	if err != nil {
		return fail("key: %v", err)
	}
	if _, err := PublicKeyOf(string(key)); err != nil {
		return fail("key: %v", err)
	}
	// Signals first: the testbed may stop us as soon as the TUN is up.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if orders.FakeIgnoreTerm {
		signal.Ignore(syscall.SIGTERM)
	}
	pc, err := net.ListenPacket("udp", ifc.Listen)
	if err != nil {
		return fail("listen: %v", err)
	}
	defer pc.Close()
	dev, err := tun.CreateTUN(ifc.Name, ifc.MTU)
	if err != nil {
		return fail("tun: %v", err)
	}
	defer dev.Close()
	go func() {
		for range dev.Events() {
		}
	}()
	link, err := netlink.LinkByName(ifc.Name)
	if err != nil {
		return fail("link: %v", err)
	}
	for _, a := range ifc.Address {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return fail("address: %v", err)
		}
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if p.Addr().Is6() {
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := netlink.AddrAdd(link, addr); err != nil {
			return fail("address %s: %v", a, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fail("up: %v", err)
	}
	fmt.Fprintf(os.Stderr, "fake endpoint: %s up, listening on %s\n", ifc.Name, pc.LocalAddr())
	sig := <-sigs
	fmt.Fprintf(os.Stderr, "fake endpoint: stopping on %v\n", sig)
	return 0
}
