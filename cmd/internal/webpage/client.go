package webpage

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"
)

// Protocols says which protocols a client may use.
type Protocols int

const (
	// Dual tries HTTP/3 first and falls back to HTTP/2, as a browser.
	Dual Protocols = iota
	// H3Only speaks HTTP/3 alone.
	H3Only
	// H2Only speaks HTTP/2 over TCP alone.
	H2Only
)

func (p Protocols) String() string {
	return [...]string{"HTTP/3 then HTTP/2", "HTTP/3", "HTTP/2"}[p]
}

// DefaultDelay is how long the client gives QUIC to connect before it
// starts TCP beside it (Chromium's and Happy Eyeballs' order of
// magnitude: RFC 8305 recommends 250 ms); a refusal starts TCP at once.
const DefaultDelay = 300 * time.Millisecond

// Config is one page load.
type Config struct {
	// URL is the page's HTML (https://host:port/path); its objects are
	// the src="..." attributes in it, on the same host.
	URL string
	// Objects, if set, are fetched at once without the HTML (a download):
	// paths or URLs resolved against URL.
	Objects   []string
	Protocols Protocols
	// Delay is the happy-eyeballs delay; 0 is DefaultDelay.
	Delay time.Duration
	// TLS is the client's TLS configuration (a test's root CA, or
	// InsecureSkipVerify); NextProtos is set per protocol.
	TLS *tls.Config
	// QUIC tunes quic-go (nil: its defaults).
	QUIC *quic.Config
	// DialUDP returns a UDP socket connected to addr (in the client's
	// network namespace): connected, so that ICMP port unreachable comes
	// back as ECONNREFUSED, as on a browser's socket.
	DialUDP func(ctx context.Context, addr string) (*net.UDPConn, error)
	// DialTCP dials TCP to addr.
	DialTCP func(ctx context.Context, addr string) (net.Conn, error)
}

// Result is what a load measured.
type Result struct {
	// Proto is the protocol the page loaded over: "h3" or "h2".
	Proto string
	// Refused is how long after the start QUIC was refused (0: it was not).
	Refused time.Duration
	// Connected is when the winning connection's handshake completed.
	Connected time.Duration
	// Total is from the start to the last byte of the last object.
	Total time.Duration
	// Objects and Bytes count the objects fetched and their bytes (the
	// HTML not included).
	Objects int
	Bytes   int64
}

// roundTripper is one connection, HTTP/3 or HTTP/2.
type roundTripper interface {
	RoundTrip(*http.Request) (*http.Response, error)
	Close() error
}

// errRefused is QUIC refused by ICMP port unreachable.
var errRefused = fmt.Errorf("QUIC refused: %w", syscall.ECONNREFUSED)

// Load fetches the page's HTML, then all its objects at once over the
// same connection (or cfg.Objects alone), and returns which protocol
// carried them and the time.
func Load(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Delay == 0 {
		cfg.Delay = DefaultDelay
	}
	start := time.Now()
	hostport, err := hostPortOf(cfg.URL)
	if err != nil {
		return Result{}, err
	}
	rt, res, err := connect(ctx, cfg, hostport, start)
	if err != nil {
		return res, err
	}
	defer rt.Close()
	objects, err := resolve(cfg.URL, cfg.Objects)
	if err != nil {
		return res, err
	}
	if len(objects) == 0 {
		html, err := get(ctx, rt, cfg.URL)
		if err != nil {
			return res, fmt.Errorf("%s: the page: %w", res.Proto, err)
		}
		if objects, err = objectsOf(cfg.URL, html); err != nil {
			return res, err
		}
	}
	var (
		wg    sync.WaitGroup
		bytes atomic.Int64
		errs  = make([]error, len(objects))
	)
	for i, u := range objects {
		wg.Go(func() {
			b, err := get(ctx, rt, u)
			bytes.Add(int64(len(b)))
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", u, err)
			}
		})
	}
	wg.Wait()
	res.Total = time.Since(start)
	res.Objects, res.Bytes = len(objects), bytes.Load()
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("%s: objects: %w", res.Proto, err)
	}
	return res, nil
}

// connect opens the connection the page loads over. Dual starts QUIC,
// and TCP once QUIC is refused or after the delay; the first handshake
// to complete wins and the other attempt is dropped.
func connect(ctx context.Context, cfg Config, hostport string, start time.Time) (roundTripper, Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type attempt struct {
		rt    roundTripper
		proto string
		err   error
	}
	results := make(chan attempt, 2)
	pending := 0
	tcpStarted := false
	startTCP := func() {
		tcpStarted = true
		pending++
		go func() {
			rt, err := dialH2(ctx, cfg, hostport)
			results <- attempt{rt, "h2", err}
		}()
	}
	var delay <-chan time.Time
	switch cfg.Protocols {
	case H2Only:
		startTCP()
	case Dual:
		t := time.NewTimer(cfg.Delay)
		defer t.Stop()
		delay = t.C
		fallthrough
	case H3Only:
		pending++
		go func() {
			rt, err := dialH3(ctx, cfg, hostport)
			results <- attempt{rt, "h3", err}
		}()
	}
	var res Result
	var errs []error
	for pending > 0 {
		select {
		case <-delay:
			delay = nil
			if !tcpStarted {
				startTCP()
			}
		case a := <-results:
			pending--
			if a.err == nil {
				res.Proto, res.Connected = a.proto, time.Since(start)
				// The loser: cancelled; closed should it connect still.
				go func(n int) {
					for range n {
						if a := <-results; a.err == nil {
							a.rt.Close()
						}
					}
				}(pending)
				return a.rt, res, nil
			}
			errs = append(errs, fmt.Errorf("%s: %w", a.proto, a.err))
			if a.proto == "h3" && errors.Is(a.err, syscall.ECONNREFUSED) {
				res.Refused = time.Since(start)
			}
			if a.proto == "h3" && cfg.Protocols == Dual && !tcpStarted {
				startTCP()
			}
		}
	}
	return nil, res, fmt.Errorf("connect to %s: %w", hostport, errors.Join(errs...))
}

// dialH3 connects over QUIC and returns an HTTP/3 connection.
func dialH3(ctx context.Context, cfg Config, hostport string) (roundTripper, error) {
	udp, err := cfg.DialUDP(ctx, hostport)
	if err != nil {
		return nil, fmt.Errorf("UDP socket: %w", err)
	}
	pc := &connectedUDP{c: udp, refused: make(chan struct{})}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-pc.refused:
			cancel(errRefused)
		case <-ctx.Done():
		}
	}()
	tlsConf := cfg.TLS.Clone()
	tlsConf.NextProtos = []string{http3.NextProtoH3}
	conn, err := quic.Dial(ctx, pc, udp.RemoteAddr(), tlsConf, cfg.QUIC)
	if err != nil {
		udp.Close()
		if pc.wasRefused() {
			return nil, errRefused
		}
		return nil, err
	}
	return &h3Conn{ClientConn: (&http3.Transport{}).NewClientConn(conn), conn: conn, udp: udp}, nil
}

type h3Conn struct {
	*http3.ClientConn
	conn *quic.Conn
	udp  *net.UDPConn
}

func (c *h3Conn) Close() error {
	err := c.conn.CloseWithError(0, "")
	c.udp.Close()
	return err
}

// dialH2 connects over TCP and TLS and returns an HTTP/2 connection.
func dialH2(ctx context.Context, cfg Config, hostport string) (roundTripper, error) {
	c, err := cfg.DialTCP(ctx, hostport)
	if err != nil {
		return nil, err
	}
	tlsConf := cfg.TLS.Clone()
	tlsConf.NextProtos = []string{http2.NextProtoTLS}
	tc := tls.Client(c, tlsConf)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("TLS: %w", err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != http2.NextProtoTLS {
		c.Close()
		return nil, fmt.Errorf("the server chose %q, not HTTP/2", p)
	}
	cc, err := (&http2.Transport{}).NewClientConn(tc)
	if err != nil {
		c.Close()
		return nil, err
	}
	return cc, nil
}

// connectedUDP lets quic-go use a connected UDP socket (it would write
// with an address, which Go refuses on a connected socket) and notes
// ECONNREFUSED, the ICMP port unreachable a browser's QUIC socket sees.
// It offers no ReadMsgUDP, so quic-go uses plain reads and writes.
type connectedUDP struct {
	c       *net.UDPConn
	once    sync.Once
	refused chan struct{}
}

func (p *connectedUDP) note(err error) error {
	if errors.Is(err, syscall.ECONNREFUSED) {
		p.once.Do(func() { close(p.refused) })
	}
	return err
}

func (p *connectedUDP) wasRefused() bool {
	select {
	case <-p.refused:
		return true
	default:
		return false
	}
}

func (p *connectedUDP) ReadFrom(b []byte) (int, net.Addr, error) {
	n, err := p.c.Read(b)
	return n, p.c.RemoteAddr(), p.note(err)
}

func (p *connectedUDP) WriteTo(b []byte, _ net.Addr) (int, error) {
	n, err := p.c.Write(b)
	return n, p.note(err)
}

func (p *connectedUDP) Close() error                       { return p.c.Close() }
func (p *connectedUDP) LocalAddr() net.Addr                { return p.c.LocalAddr() }
func (p *connectedUDP) SetDeadline(t time.Time) error      { return p.c.SetDeadline(t) }
func (p *connectedUDP) SetReadDeadline(t time.Time) error  { return p.c.SetReadDeadline(t) }
func (p *connectedUDP) SetWriteDeadline(t time.Time) error { return p.c.SetWriteDeadline(t) }
func (p *connectedUDP) SetReadBuffer(n int) error          { return p.c.SetReadBuffer(n) }
func (p *connectedUDP) SetWriteBuffer(n int) error         { return p.c.SetWriteBuffer(n) }

// get fetches u whole and returns its body; a status other than 200 is
// an error.
func get(ctx context.Context, rt roundTripper, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return b, err
	}
	if resp.StatusCode != http.StatusOK {
		return b, fmt.Errorf("status %s", resp.Status)
	}
	return b, nil
}

var srcAttr = regexp.MustCompile(`src="([^"]+)"`)

// objectsOf returns the URLs of the page's objects, resolved against the
// page's URL.
func objectsOf(page string, html []byte) ([]string, error) {
	var refs []string
	for _, m := range srcAttr.FindAllSubmatch(html, -1) {
		refs = append(refs, string(m[1]))
	}
	return resolve(page, refs)
}

// resolve returns refs resolved against page; each must be on its host.
func resolve(page string, refs []string) ([]string, error) {
	base, err := url.Parse(page)
	if err != nil {
		return nil, err
	}
	var us []string
	for _, r := range refs {
		ref, err := url.Parse(r)
		if err != nil {
			return nil, fmt.Errorf("the page's object %q: %w", r, err)
		}
		u := base.ResolveReference(ref)
		if u.Host != base.Host {
			return nil, fmt.Errorf("the page's object %q is on another host", r)
		}
		us = append(us, u.String())
	}
	return us, nil
}

// hostPortOf returns the host:port of an https URL (443 if it names none).
func hostPortOf(page string) (string, error) {
	u, err := url.Parse(page)
	if err != nil {
		return "", err
	}
	if u.Scheme != "https" {
		return "", fmt.Errorf("%s: not an https URL", page)
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "443"), nil
	}
	return u.Host, nil
}
