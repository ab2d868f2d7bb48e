// Package streams holds the stream state of an scps association, the
// data of its streams and flow control as quic-go keeps them apart from
// the connection: one stream's state (State), the stream table with its
// limits and the scheduler's queues (Map, Queue), connection-level flow
// control (ConnFlow), the memory budget's account (MemBudget) and the
// auto-tuned windows (Window), and Manager, which holds the table, the
// flow control and the budget together with the rules that join them:
// creating, resetting, aborting and removing a stream, granting stream
// and connection credit, waking writers that wait for the budget,
// bounding the received ranges, writing the streams' frames into packets,
// applying their frames of received packets, and what happens to their
// frames of acknowledged and lost packets. It does no I/O and reads no clock:
// times are durations since the association's epoch, handed in by the
// caller, what the driver must hear goes to an Events sink, and the
// frames written are recorded through Frames. The application's
// operations on a stream (open, write, read, close, reset) are Manager's
// too (streamapi.go); the Association's public stream API only hands them
// in. The packet's plan (when to send, ACKs, datagrams and their share of
// the link) is the Association's, in package scps.
//
// Where things are:
//
//	manager.go      Manager: the streams, flow control and budget as one
//	                owner; a stream's life, reads and writes, the budget's
//	                and credit's rules
//	recvframes.go   the streams' frames of received packets (STREAM,
//	                RESET_STREAM)
//	recvranges.go   the bound on received stream ranges
//	sentframes.go   the streams' frames of acknowledged and lost packets
//	streamapi.go    the application's operations on a stream, by id, and
//	                their errors
//	streamstate.go  State: one stream's send and receive halves
//	streammap.go    Map: stream table, limits, send queues
//	streamqueue.go  Queue: FIFO of streams for the scheduler
//	appendframes.go the streams' frame writers: control frames, repairs and
//	                new data, drawn from the queues
//	connflow.go     ConnFlow: connection-level flow control
//	memory.go       MemBudget: the memory budget's account and shares
//	window.go       Window: the auto-tuned size of receive windows and
//	                send buffers
//	readerstall.go  the cut of a stream's credit when its reader falls
//	                behind
//	holecredit.go   the credit a told stream gets beyond its window while
//	                a hole (a repair lost once or twice) holds its reader
package streams
