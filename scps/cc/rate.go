package cc

// This file owns "rate": open loop at the configured link rate, for links
// the association has to itself (the RI's "pure rate" mode). The pacer at
// SendRate is the only limit; the window is twice the bandwidth-delay
// product so it never is, and no loss changes anything.

import "time"

func init() { Register("rate", func(p Params) Controller { return &Rate{p: p} }) }

// Rate is the "rate" controller. It needs Params.SendRate.
type Rate struct{ p Params }

// Name implements Controller.
func (c *Rate) Name() string { return "rate" }

// OnPacketSent implements Controller.
func (c *Rate) OnPacketSent(time.Time, int, int) {}

// OnAck implements Controller.
func (c *Rate) OnAck(time.Time, AckEvent) {}

// OnCongestionEvent implements Controller: losses are repaired, never
// answered with a slower rate.
func (c *Rate) OnCongestionEvent(time.Time, LossEvent) {}

// Window implements Controller.
func (c *Rate) Window() int { return windowCap(&c.p) }

// PacingRate implements Controller: the configured rate.
func (c *Rate) PacingRate() float64 { return float64(c.p.SendRate) / 8 }

// InSlowStart implements Controller.
func (c *Rate) InSlowStart() bool { return false }
