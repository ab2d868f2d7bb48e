package stack

import (
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// TestCloseDuringAccept: a client whose local handshake is in progress
// when the stack closes (its SYN answered, its ACK on the way) gets an RST
// once the ACK is in, not silence until its own timeout.
func TestCloseDuringAccept(t *testing.T) {
	out := &captured{}
	accepted := make(chan error, 1)
	s, err := New(Config{MTU: 1400, Output: out.output, Logger: testLogger(),
		HandleTCP: func(r *TCPRequest) {
			go func() { _, err := r.Accept(); accepted <- err }()
		}})
	if err != nil {
		t.Fatal(err)
	}
	s.Inject(buildTCP(client4, server4, header.TCPFlagSyn, 1000, nil))
	find := func(flag header.TCPFlags) []byte {
		for _, p := range out.all() {
			src, dst, flags, ok := parseTCP(p)
			if ok && src == server4 && dst == client4 && flags&flag == flag {
				return p
			}
		}
		return nil
	}
	var synAck []byte
	if !waitFor(5*time.Second, func() bool { synAck = find(header.TCPFlagSyn | header.TCPFlagAck); return synAck != nil }) {
		t.Fatal("no SYN-ACK")
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	// The client's ACK arrives while the stack is closing.
	time.Sleep(20 * time.Millisecond)
	serverSeq := header.TCP(header.IPv4(synAck).Payload()).SequenceNumber()
	ack := buildTCPAck(client4, server4, header.TCPFlagAck, 1001, serverSeq+1, nil)
	s.Inject(ack)
	select {
	case <-closed:
	case <-time.After(hangGuard):
		t.Fatal("Close did not return")
	}
	if find(header.TCPFlagRst) == nil {
		t.Errorf("no RST to the client whose connection was being accepted; sent %d packets", len(out.all()))
	}
	select {
	case err := <-accepted:
		if err == nil {
			t.Error("Accept returned a connection on a closed stack")
		}
	case <-time.After(hangGuard):
		t.Error("Accept still blocked after Close")
	}
}
