package stack

import (
	"net/netip"
	"syscall"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// processCPU is the CPU time the process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSYNFloodCPU measures the process CPU per spoofed SYN of a flood
// of 10,000 a second (in bursts of 50 every 5 ms, as the e2e flooder), the
// work it leaves behind (goroutines, timers, evictions) included, with a
// handler that accepts every request as the tunnel's does (cpu-ns/syn).
func BenchmarkSYNFloodCPU(b *testing.B) {
	s, err := New(Config{MTU: 1400, MaxInFlight: 4096, Output: func([][]byte, int) error { return nil }, Logger: testLogger(),
		HandleTCP: func(r *TCPRequest) {
			go func() {
				if c, err := r.Accept(); err == nil {
					c.Close()
				}
			}()
		}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	syn := func(i int) []byte {
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), uint16(1024+i%60000))
		return buildTCP(src, server4, header.TCPFlagSyn, uint32(i)*7919, nil)
	}
	for i := range 2000 { // the flood under way
		s.Inject(syn(1<<22 + i))
	}
	time.Sleep(500 * time.Millisecond)
	b.ResetTimer()
	cpu0, t0 := processCPU(), time.Now()
	for i := range b.N {
		s.Inject(syn(i))
		if i%50 == 49 {
			time.Sleep(time.Until(t0.Add(time.Duration(i+1) * 100 * time.Microsecond)))
		}
	}
	time.Sleep(300 * time.Millisecond)
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/syn")
}
