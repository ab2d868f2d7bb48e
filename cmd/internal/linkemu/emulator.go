package linkemu

// This file owns the packet path of the emulator: per direction one reader
// goroutine (sending TUN -> link model -> ring) and one writer goroutine
// (ring -> receiving TUN at each packet's delivery time), with counters.
// Packets the reorder model holds back go to a second ring: each ring's
// delivery times still never decrease, and the writer serves whichever
// head is due first.
// There is no goroutine or allocation per packet: batches are read and
// written through wireguard's TUN batching, packets are copied into slots
// the ring owns, and the writer sleeps on one timer until the head is due.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"scpsvpn/configs"
)

// device is the part of golang.zx2c4.com/wireguard/tun.Device the
// emulator uses; tests substitute an in-memory pair.
type device interface {
	Read(bufs [][]byte, sizes []int, offset int) (int, error)
	Write(bufs [][]byte, offset int) (int, error)
	BatchSize() int
	Close() error
}

const (
	// writeOffset is the headroom Write needs for the virtio-net header.
	writeOffset = 16
	// maxPacket is the largest packet a TUN read can hand over.
	maxPacket = 65535
	// coarseMargin is how early the writer's Go timer fires before a
	// delivery: Go timers can be up to ~1 ms late, so the last stretch is
	// slept with nanosleep, which is accurate to tens of microseconds.
	coarseMargin = 2 * time.Millisecond
)

// dirCounters are one direction's live counters.
type dirCounters struct {
	inPackets, inBytes, packets, bytes      atomic.Uint64
	dropLoss, dropQueue, dropOutage, errors atomic.Uint64
	reordered                               atomic.Uint64
}

func (c *dirCounters) snapshot() DirCounters {
	return DirCounters{
		InPackets: c.inPackets.Load(), InBytes: c.inBytes.Load(),
		Packets: c.packets.Load(), Bytes: c.bytes.Load(),
		DropLoss: c.dropLoss.Load(), DropQueue: c.dropQueue.Load(), DropOutage: c.dropOutage.Load(),
		Errors: c.errors.Load(), Reordered: c.reordered.Load(),
	}
}

// pipe is one direction: src -> model -> ring (or late) -> dst.
type pipe struct {
	name     string
	src, dst device
	model    *dirModel
	ring     *ring
	late     *ring // held-back packets; nil without a reorder model
	ctr      dirCounters
	now      func() time.Duration
	stop     <-chan struct{}
	log      *slog.Logger
	// trace, set only by tests and before Start, sees each packet the
	// reader judged: its bytes, the emulator time it was read at (the
	// time the model judged it by), the delivery time and the verdict.
	// Tests check the model's decisions against the emulator's own clock,
	// which a loaded machine cannot skew. Nil in production.
	trace func(pkt []byte, read, at time.Duration, v verdict)
}

// Emulator is a running link between two TUN devices.
type Emulator struct {
	opts       Options
	log        *slog.Logger
	seed       uint64
	devA, devB device
	fwd, ret   *pipe
	start      time.Time
	stop       chan struct{}
	wg         sync.WaitGroup
	startOnce  sync.Once
	stopOnce   sync.Once
	final      Counters
	afterClose func() error // checks run once the devices are closed
}

// newEmulator wires the model between two opened devices.
func newEmulator(opts Options, devA, devB device) *Emulator {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	seed := opts.Seed
	for seed == 0 {
		seed = rand.Uint64()
	}
	e := &Emulator{opts: opts, log: log.With("component", "linkemu"), seed: seed, devA: devA, devB: devB, stop: make(chan struct{})}
	outages := &outageSet{windows: opts.Outages, every: opts.OutageEvery}
	now := func() time.Duration { return time.Since(e.start) }
	mk := func(name string, src, dst device, d *Dir, stream uint64) *pipe {
		p := &pipe{
			name: name, src: src, dst: dst,
			model: newDirModel(*d, opts.queueLimit(d), outages, seed, stream),
			ring:  newRing(ringSlots, opts.mtu()+writeOffset),
			now:   now, stop: e.stop,
			log: e.log.With("dir", name),
		}
		if d.Reorder.P > 0 {
			p.late = newRing(ringSlots, opts.mtu()+writeOffset)
			p.late.notify = p.ring.notify // one wake-up for the writer
		}
		return p
	}
	e.fwd = mk("forward", devA, devB, &opts.Fwd, 1)
	e.ret = mk("return", devB, devA, &opts.Ret, 2)
	return e
}

// Start starts forwarding; schedules (rate changes, outages) count from now.
func (e *Emulator) Start() {
	e.startOnce.Do(func() {
		e.start = time.Now()
		for _, p := range []*pipe{e.fwd, e.ret} {
			e.wg.Add(2)
			go func() { defer e.wg.Done(); p.readLoop() }()
			go func() { defer e.wg.Done(); p.writeLoop() }()
		}
		e.log.Info("link up", "seed", e.seed,
			"fwd_rate", configs.FormatRate(e.opts.Fwd.Rate), "fwd_delay", e.opts.Fwd.Delay,
			"ret_rate", configs.FormatRate(e.opts.Ret.Rate), "ret_delay", e.opts.Ret.Delay,
			"fwd_queue", e.fwd.model.limit, "ret_queue", e.ret.model.limit)
	})
}

// Stop stops forwarding, closes (and so removes) both TUN devices and
// returns the final counters. It is safe to call more than once.
func (e *Emulator) Stop() (Counters, error) {
	var err error
	e.stopOnce.Do(func() {
		close(e.stop)
		err = errors.Join(e.devA.Close(), e.devB.Close())
		e.wg.Wait()
		if e.afterClose != nil {
			err = errors.Join(err, e.afterClose())
		}
		e.final = e.Counters()
		e.log.Info("link down")
	})
	return e.final, err
}

// Counters returns the live counters.
func (e *Emulator) Counters() Counters {
	return Counters{Fwd: e.fwd.ctr.snapshot(), Ret: e.ret.ctr.snapshot()}
}

// Elapsed is the emulator's clock: schedules and outages are offsets on it.
func (e *Emulator) Elapsed() time.Duration { return time.Since(e.start) }

// Seed returns the loss seed in use (the chosen one when Options.Seed was 0).
func (e *Emulator) Seed() uint64 { return e.seed }

// readLoop reads batches from the sending device and queues the survivors.
func (p *pipe) readLoop() {
	p.log.Debug("reader started")
	defer p.log.Debug("reader stopped")
	bs := p.src.BatchSize()
	bufs := make([][]byte, bs)
	sizes := make([]int, bs)
	for i := range bufs {
		bufs[i] = make([]byte, maxPacket)
	}
	failures := 0
	for {
		n, err := p.src.Read(bufs, sizes, 0)
		if err != nil {
			if errors.Is(err, os.ErrClosed) || p.stopped() {
				return
			}
			p.ctr.errors.Add(1)
			p.log.Debug("read failed", "err", err)
			if failures++; failures > 100 {
				time.Sleep(10 * time.Millisecond) // a persistent error must not spin
			}
			if n == 0 {
				continue
			}
		} else {
			failures = 0
		}
		now := p.now()
		main := p.ring.batch(n)
		var late batch
		if p.late != nil {
			late = p.late.batch(n)
		}
		for i := range n {
			size := sizes[i]
			p.ctr.inPackets.Add(1)
			p.ctr.inBytes.Add(uint64(size))
			at, v := p.model.admit(now, size)
			if p.trace != nil {
				p.trace(bufs[i][:size], now, at, v)
			}
			switch v {
			case dropLoss:
				p.ctr.dropLoss.Add(1)
			case dropQueue:
				p.ctr.dropQueue.Add(1)
			case dropOutage:
				p.ctr.dropOutage.Add(1)
			case deliver:
				p.queue(&main, bufs[i][:size], at)
			case deliverLate:
				p.ctr.reordered.Add(1)
				p.queue(&late, bufs[i][:size], at)
			}
		}
		main.publish()
		late.publish()
	}
}

// queue adds pkt to batch b, or counts it lost when the ring is full.
func (p *pipe) queue(b *batch, pkt []byte, at time.Duration) {
	if !b.add(pkt, at) { // more in flight than the ring may hold: the host's limit, not the model's
		p.ctr.errors.Add(1)
	}
}

// next reports when the first queued packet of either ring is due.
func (p *pipe) next() (time.Duration, bool) {
	at, ok := p.ring.next()
	if p.late != nil {
		if lat, lok := p.late.next(); lok && (!ok || lat < at) {
			return lat, true
		}
	}
	return at, ok
}

// take moves the packets of both rings due by now into dst (see ring.take).
// A batch holds the held-back ones after the others; they are written
// together.
func (p *pipe) take(now time.Duration, dst [][]byte) (int, uint64) {
	k, bytes := p.ring.take(now, dst, writeOffset)
	if p.late != nil {
		lk, lbytes := p.late.take(now, dst[k:], writeOffset)
		k, bytes = k+lk, bytes+lbytes
	}
	return k, bytes
}

// writeLoop delivers queued packets to the receiving device when due.
func (p *pipe) writeLoop() {
	p.log.Debug("writer started")
	defer p.log.Debug("writer stopped")
	bs := p.dst.BatchSize()
	staging := make([][]byte, bs)
	for i := range staging {
		// Full-size buffers let the device coalesce segments (GRO) in place.
		staging[i] = make([]byte, writeOffset+maxPacket)
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		at, ok := p.next()
		if !ok {
			select {
			case <-p.ring.notify:
				continue
			case <-p.stop:
				return
			}
		}
		if at > p.now() {
			if !p.sleepUntil(at, timer) {
				return
			}
			continue // more may have become due meanwhile
		}
		k, bytes := p.take(p.now(), staging)
		if _, err := p.dst.Write(staging[:k], writeOffset); err != nil {
			if errors.Is(err, os.ErrClosed) || p.stopped() {
				return
			}
			p.ctr.errors.Add(uint64(k))
			p.log.Debug("write failed", "packets", k, "err", err)
			continue
		}
		p.ctr.packets.Add(uint64(k))
		p.ctr.bytes.Add(bytes)
	}
}

// sleepUntil sleeps until the emulator clock reaches at; false if stopped.
func (p *pipe) sleepUntil(at time.Duration, timer *time.Timer) bool {
	for {
		d := at - p.now()
		if d <= 0 {
			return true
		}
		if d <= coarseMargin {
			preciseSleep(d)
			continue
		}
		timer.Reset(d - coarseMargin)
		select {
		case <-timer.C:
		case <-p.stop:
			timer.Stop()
			return false
		}
	}
}

func (p *pipe) stopped() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}

// Run opens the link, forwards until ctx is done, removes the devices and
// returns the counters.
func Run(ctx context.Context, opts Options) (Counters, error) {
	e, err := New(opts)
	if err != nil {
		return Counters{}, err
	}
	e.Start()
	<-ctx.Done()
	c, err := e.Stop()
	if err != nil {
		return c, fmt.Errorf("linkemu: stopping: %w", err)
	}
	return c, nil
}
