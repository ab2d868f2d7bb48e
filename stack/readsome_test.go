package stack

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"testing"
	"time"
)

// TestReadSome: ReadSome hands over received data without waiting, never
// more than max at once and all of it in order, says ErrWouldBlock when
// nothing is there (WaitReadable then returns once data arrives) and
// io.EOF after the peer's FIN; a reset wakes a waiting reader.
func TestReadSome(t *testing.T) {
	h, acc := acceptAll()
	n := newTestNet(t, Config{HandleTCP: h}, Config{})
	cc := dial(t, n.b, client4, server4)
	sc := recvAccepted(t, acc).conn

	var got bytes.Buffer
	if k, err := sc.ReadSome(&got, 100); k != 0 || !errors.Is(err, ErrWouldBlock) {
		t.Fatalf("empty connection: %d, %v", k, err)
	}
	want := randBytes(200_000, 9)
	go func() {
		cc.Write(want)
		cc.CloseWrite()
	}()
	const max = 3000
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		before := got.Len()
		k, err := sc.ReadSome(&got, max)
		if k != got.Len()-before || k > max {
			t.Fatalf("ReadSome said %d, wrote %d (max %d)", k, got.Len()-before, max)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, ErrWouldBlock) {
			sc.WaitReadable(nil)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("read %d bytes, want %d equal", got.Len(), len(want))
	}

	// A reader waiting for data is woken by the peer's reset.
	cc2 := dial(t, n.b, netip.MustParseAddrPort("10.1.0.7:5556"), server4)
	sc2 := recvAccepted(t, acc).conn
	woke := make(chan error, 1)
	go func() {
		sc2.WaitReadable(nil)
		_, err := sc2.ReadSome(io.Discard, 100)
		woke <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cc2.Abort()
	select {
	case err := <-woke:
		if err == nil || errors.Is(err, ErrWouldBlock) || errors.Is(err, io.EOF) {
			t.Errorf("after the peer's reset: %v", err)
		}
	case <-time.After(hangGuard):
		t.Fatal("the peer's reset did not wake WaitReadable")
	}
	cc.Close()
	sc.Close()
	sc2.Close()
}
