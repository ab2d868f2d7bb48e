package linkemu

// This file owns the precise short sleep of the writer: Go timers wake up to
// about a millisecond late (the runtime polls with millisecond timeouts), which
// would add up to 2 ms to every round trip, so the last stretch before a
// delivery is slept with nanosleep(2), a blocking system call accurate to
// tens of microseconds.

import (
	"time"

	"golang.org/x/sys/unix"
)

func preciseSleep(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	_ = unix.Nanosleep(&ts, nil) // EINTR only shortens the sleep; the caller loops
}
