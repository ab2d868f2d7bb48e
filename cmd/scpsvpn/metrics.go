package main

// The opt-in Prometheus endpoint ([interface] metrics): the endpoint's own
// collector (tunnel.NewCollector, read at scrape time), the build's
// version, and the Go runtime and process collectors (memory, goroutines,
// file descriptors, CPU) on /metrics.

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"scpsvpn/tunnel"
)

// serveMetrics serves ep's metrics on addr until the returned function is
// called. A failure to listen is logged, not returned: monitoring must not
// keep the tunnel down.
func serveMetrics(addr netip.AddrPort, ep *tunnel.Endpoint, log *slog.Logger) (stop func()) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		tunnel.NewCollector(ep),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "scpsvpn_build_info",
			Help:        "Always 1; labels name the running build.",
			ConstLabels: prometheus.Labels{"version": versionString(), "goversion": runtime.Version()},
		}, func() float64 { return 1 }),
	)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		log.Error("metrics unavailable; the tunnel runs on", "listen", addr, "err", err)
		return func() {}
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	log.Info("metrics served", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() {
		srv.Close()
		wg.Wait()
	}
}
