// Package bench measures scpsvpn against kernel TCP through the project's
// emulated satellite link: a matrix of link conditions times contenders,
// each run on a fresh two-site testbed, with goodput, time to first byte,
// request/response latency under load and link overhead, written as a
// report directory (report.md, results.json, plots). `scpsvpn demo` runs
// the same machinery for one condition and two contenders.
//
// Start at cli.go (the command and its loop over conditions x
// contenders), then run.go (one run on a fresh testbed). --workload picks
// what a run measures: a bulk download (the default), or one of the
// workloads below, each in a file of its own; docs/bench.md says how to
// run them and what each figure means.
package bench

// Where things are. Each file opens with a comment saying what it owns.
//
// The command and one run:
//
//	cli.go                `scpsvpn bench`: flags, the loop over conditions
//	                      x contenders, the report directory
//	conditions.go         Condition and the table of link conditions, as
//	                      emulator options and [peer.link] tables
//	contenders.go         the contenders: kernel TCP by congestion control,
//	                      scpsvpn by controller
//	run.go                one run: a fresh testbed, the server at B, the
//	                      measuring client at A
//	traffic.go            the server and the client's timed download
//	wire.go               the request line between client and server
//	progress.go           the live progress bar (demo and bench)
//
// The workloads (--workload):
//
//	pageload.go           page: a web page over 6 HTTP/1.1 connections and
//	                      one HTTP/2 connection, against its floor
//	flows.go              flows: many flows through one association (idle
//	                      memory, opens, small downloads' fairness, a
//	                      request beside bulk)
//	stalled.go            stalled: a fresh download beside clients that
//	                      stopped reading, a slow reader beside bulk
//	resume.go             resume: the first download after idle, after a
//	                      restart, after the rate fell (careful resume)
//	multipath.go          multipath: two emulated links at once, shares,
//	                      bonding, failover
//	follow.go             the pings and UDP echoes that follow a failover
//	                      (multipath)
//	share.go              the shared-link contenders: two downloads on one
//	                      link (share-sites, share-cubic, share-bbr)
//
// The figures and the report:
//
//	metrics.go            Result and the arithmetic that fills it
//	transport.go          the transport's targets: share of the limit,
//	                      drops, time to 90% of the rate, outages
//	senderlog.go          the sender's timeline written with --keep-logs
//	report.go             Report, results.json and report.md
//	plot.go               the report's plots
