// Package webpage serves a web page over HTTP/3 and HTTP/2 and loads it
// with a client that speaks both, as a browser does: HTTP/3 first, and
// HTTP/2 over TCP when QUIC is refused (ICMP port unreachable, which the
// endpoint's quic = "fallback" sends) or has not connected within a
// happy-eyeballs delay. The QUIC measurement (cmd/internal/e2e,
// docs/quic.md) uses it for the page under each quic policy; HTTP/3 is
// quic-go's, so it is also a second QUIC stack beside ngtcp2's.
package webpage

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/quic-go/quic-go/http3"
)

// Page returns the HTML of a page whose objects are paths: one <img> each.
func Page(paths []string) []byte {
	var b strings.Builder
	b.WriteString("<!doctype html>\n<title>page</title>\n")
	for _, p := range paths {
		fmt.Fprintf(&b, "<img src=%q>\n", p)
	}
	return []byte(b.String())
}

// Server serves a handler over HTTP/3 on a UDP socket and over HTTP/2
// (TLS on TCP) on a listener, as a site that offers both does.
type Server struct {
	h3   *http3.Server
	h2   *http.Server
	wg   sync.WaitGroup
	errs chan error
}

// Serve starts serving h on udp (HTTP/3) and tcp (HTTP/2); either may be
// nil. The sockets are the caller's (made in the site's network
// namespace); Close closes them.
func Serve(h http.Handler, cert tls.Certificate, udp net.PacketConn, tcp net.Listener) *Server {
	s := &Server{errs: make(chan error, 2)}
	if udp != nil {
		s.h3 = &http3.Server{Handler: h, TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}})}
		s.run(func() error {
			defer udp.Close()
			return s.h3.Serve(udp)
		})
	}
	if tcp != nil {
		s.h2 = &http.Server{Handler: h, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}}
		s.run(func() error { return s.h2.ServeTLS(tcp, "", "") })
	}
	return s
}

func (s *Server) run(serve func() error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			s.errs <- err
		}
	}()
}

// Close stops both servers and returns the first error either met.
func (s *Server) Close() error {
	if s.h3 != nil {
		s.h3.Close()
	}
	if s.h2 != nil {
		s.h2.Close()
	}
	s.wg.Wait()
	select {
	case err := <-s.errs:
		return fmt.Errorf("page server: %w", err)
	default:
		return nil
	}
}
