package testbed

// This file owns the teardown paths outside a plain deferred Close: on a
// signal (the CLI's Ctrl-C, a SIGTERM from a supervisor) and the test helper
// that ties a testbed to a test's lifetime.

import (
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// CloseOnSignal tears the testbed down as soon as the process receives one
// of sigs (default SIGINT, SIGTERM, SIGHUP), then calls onSignal, or exits
// with 128+signal when onSignal is nil. Teardown first means that whatever
// the program was blocked on (an endpoint, a socket in a namespace) is gone
// when it resumes. The returned function uninstalls the handler; call it
// (deferred) once the program has closed the testbed itself.
func (tb *Testbed) CloseOnSignal(onSignal func(os.Signal), sigs ...os.Signal) (stop func()) {
	return closeOnSignal(tb.log, "testbed", tb.Close, onSignal, sigs)
}

// closeOnSignal is CloseOnSignal for either topology (what: "testbed",
// "star"), torn down by closeTopo.
func closeOnSignal(log *slog.Logger, what string, closeTopo func() error, onSignal func(os.Signal), sigs []os.Signal) (stop func()) {
	if len(sigs) == 0 {
		sigs = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	quit := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			log.Warn("signal: tearing the "+what+" down", "signal", sig)
			closeTopo()
			if onSignal != nil {
				onSignal(sig)
				return
			}
			code := 1
			if s, ok := sig.(syscall.Signal); ok {
				code = 128 + int(s)
			}
			os.Exit(code)
		case <-quit:
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			signal.Stop(ch)
			close(quit)
		})
	}
}

// FatalTB is the part of testing.TB that ForTest uses.
type FatalTB interface {
	TB
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// ForTest builds a testbed for a test: it fails the test if that is not
// possible, dumps the endpoint logs if the test fails and closes the testbed
// when the test ends (also after a panic).
func ForTest(t FatalTB, cfg Config) *Testbed {
	t.Helper()
	return forTest(t, func() (*Testbed, error) { return New(cfg) })
}

// forTest is ForTest for either topology, built by build.
func forTest[T interface {
	Close() error
	DumpLogsOnFailure(TB)
}](t FatalTB, build func() (T, error)) T {
	t.Helper()
	top, err := build()
	if err != nil {
		t.Fatalf("testbed: %v", err)
	}
	t.Cleanup(func() {
		if err := top.Close(); err != nil {
			t.Errorf("testbed close: %v", err) // something leaked
		}
	})
	top.DumpLogsOnFailure(t) // registered after Close: runs before it
	return top
}
