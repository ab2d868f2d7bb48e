// Package linkemu is a userspace satellite-link emulator: a packet scheduler
// between two TUN devices, each in its own network namespace, for kernels
// without netem (scpsvpn's end-to-end tests, demo and benchmark use it).
//
// Each IP packet crossing the link, per direction (forward = A->B,
// return = B->A), is subject to:
//   - serialization at the link rate (departure = max(now, previous
//     departure) + size/rate, counting the whole IP packet), with rate
//     changes on a schedule;
//   - a drop-tail queue of the bytes waiting for serialization (the modem's
//     buffer; default one bandwidth-delay product, at least 64 KiB);
//   - the one-way delay;
//   - random loss, bit errors (loss 1-(1-BER)^(8*size)) and Gilbert-Elliott
//     burst loss, drawn from a seeded generator so a seed reproduces losses;
//   - reordering: a share of the packets held back by an extra delay, so
//     later packets overtake them (drawn from the same generator);
//   - outages, scheduled and periodic, dropping both directions.
//
// Use it as a library (New, Start, Stop or Run, with Options) or as the
// `scpsvpn linkemu` command (Command), e.g. a GEO link between two
// namespaces:
//
//	scpsvpn linkemu --ns-a site-a --ns-b site-b \
//	    --addr-a 10.200.0.1/24 --addr-b 10.200.0.2/24 \
//	    --fwd-rate 10Mbit --ret-rate 2Mbit --delay 300ms \
//	    --fwd-loss 1% --ret-loss 0.1% --outage-every 15s:50ms --seed 1
//
// Accuracy, measured through two namespaces on a 2-core machine
// otherwise idle: round trips within about 1 ms of the configured one (Go
// timers are coarse, so the last 2 ms before a delivery are slept with
// nanosleep; BenchmarkNetnsRTT: 0.7 ms late at the median), rates within
// 0.1% (BenchmarkNetnsRate: 100.0%); unthrottled it carries more than a
// gigabit per second of TCP (BenchmarkNetnsThroughput: 1.5 Gbit/s). On a
// loaded machine it is late by what the machine's wake-ups take; the
// tests check only what no load changes (never early, never above the
// rate, outages drop what falls in them).
package linkemu
