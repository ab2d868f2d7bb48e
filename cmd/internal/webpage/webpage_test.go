package webpage

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"testing"
	"testing/fstest"
	"time"
)

// The test page: 20 objects of 10 kB.
const (
	objects    = 20
	objectSize = 10_000
)

func pageFS() fstest.MapFS {
	fs := fstest.MapFS{}
	var paths []string
	for i := range objects {
		p := "p/" + strconv.Itoa(i)
		paths = append(paths, "/"+p)
		fs[p] = &fstest.MapFile{Data: make([]byte, objectSize)}
	}
	fs["index.html"] = &fstest.MapFile{Data: Page(paths)}
	return fs
}

// site serves the page on loopback over TCP, and over UDP as udp says:
// "h3" serves HTTP/3, "silent" binds the port and never answers, ""
// leaves it closed (the kernel answers port unreachable).
func site(t *testing.T, udp string) string {
	t.Helper()
	certPEM, keyPEM, err := SelfSigned()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var pc net.PacketConn
	if udp != "" {
		if pc, err = net.ListenPacket("udp", ln.Addr().String()); err != nil {
			t.Fatal(err)
		}
	}
	h := http.FileServerFS(pageFS())
	var s *Server
	if udp == "h3" {
		s = Serve(h, cert, pc, ln)
	} else {
		s = Serve(h, cert, nil, ln)
		if pc != nil {
			t.Cleanup(func() { pc.Close() })
		}
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return "https://" + ln.Addr().String() + "/"
}

func loopback(u string, p Protocols) Config {
	var d net.Dialer
	return Config{
		URL:       u,
		Protocols: p,
		TLS:       &tls.Config{InsecureSkipVerify: true},
		DialUDP: func(ctx context.Context, addr string) (*net.UDPConn, error) {
			c, err := d.DialContext(ctx, "udp", addr)
			if err != nil {
				return nil, err
			}
			return c.(*net.UDPConn), nil
		},
		DialTCP: func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) },
	}
}

func load(t *testing.T, cfg Config) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Load(ctx, cfg)
	if err != nil {
		t.Fatalf("load %s: %v", cfg.Protocols, err)
	}
	if res.Objects != objects || res.Bytes != objects*objectSize {
		t.Fatalf("%s: %d objects, %d bytes; want %d, %d", res.Proto, res.Objects, res.Bytes, objects, objects*objectSize)
	}
	t.Logf("%s over %s: refused after %v, connected after %v, %v in all", cfg.Protocols, res.Proto, res.Refused, res.Connected, res.Total)
	return res
}

// A site that serves both: the dual client loads over HTTP/3, each
// single-protocol client over its own. (The delay is long: a busy
// machine's slow QUIC handshake must not let TCP win the race.)
func TestLoadServesBoth(t *testing.T) {
	u := site(t, "h3")
	for p, want := range map[Protocols]string{Dual: "h3", H3Only: "h3", H2Only: "h2"} {
		cfg := loopback(u, p)
		cfg.Delay = time.Hour
		if res := load(t, cfg); res.Proto != want || res.Refused != 0 {
			t.Errorf("%s loaded over %s (refused after %v), want %s", p, res.Proto, res.Refused, want)
		}
	}
}

// QUIC refused (port unreachable, as the endpoint's fallback sends): the
// dual client goes over to HTTP/2 at once, not after the delay.
func TestLoadRefusedFallsBack(t *testing.T) {
	u := site(t, "")
	cfg := loopback(u, Dual)
	cfg.Delay = time.Hour // only the refusal can start TCP
	res := load(t, cfg)
	if res.Proto != "h2" || res.Refused == 0 {
		t.Errorf("loaded over %s, refused after %v; want h2 after a refusal", res.Proto, res.Refused)
	}
	cfg = loopback(u, H2Only)
	cfg.Objects = []string{"/p/1", "p/2"}
	if res, err := Load(context.Background(), cfg); err != nil || res.Objects != 2 || res.Bytes != 2*objectSize {
		t.Errorf("two objects without the page: %+v, %v", res, err)
	}
	cfg = loopback(u, H3Only)
	if _, err := Load(context.Background(), cfg); err == nil {
		t.Error("HTTP/3 alone loaded a page whose QUIC port is closed")
	}
}

// QUIC unanswered (a network that drops UDP): after the delay the dual
// client starts TCP beside it and loads over HTTP/2.
func TestLoadSilentFallsBackAfterDelay(t *testing.T) {
	cfg := loopback(site(t, "silent"), Dual)
	cfg.Delay = 100 * time.Millisecond
	res := load(t, cfg)
	if res.Proto != "h2" || res.Refused != 0 || res.Connected < cfg.Delay {
		t.Errorf("loaded over %s, refused after %v, connected after %v; want h2, no refusal, after the %v delay", res.Proto, res.Refused, res.Connected, cfg.Delay)
	}
}

func TestObjectsOf(t *testing.T) {
	got, err := objectsOf("https://h:8/d/index.html", Page([]string{"/p/0", "x"}))
	if err != nil || fmt.Sprint(got) != "[https://h:8/p/0 https://h:8/d/x]" {
		t.Errorf("objectsOf = %v, %v", got, err)
	}
	if _, err := objectsOf("https://h:8/", []byte(`<img src="https://other/p">`)); err == nil {
		t.Error("an object on another host was accepted")
	}
}
