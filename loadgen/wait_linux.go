//go:build linux

package loadgen

import (
	"runtime"
	"syscall"
	"time"
)

// fineWindow is how close to a send time the pacer stops trusting the Go timer (see waitUntil).
const fineWindow = 2 * time.Millisecond

const (
	prSetTimerslack = 29 // prctl(2) PR_SET_TIMERSLACK
	prGetTimerslack = 30 // prctl(2) PR_GET_TIMERSLACK
)

// lockPacer pins the pacing goroutine to its OS thread and sets that thread's timer slack to
// 1 ns (the default 50 us would be added to every precise sleep). The returned func restores
// the slack and unpins.
func lockPacer() (unlock func()) {
	runtime.LockOSThread()
	old, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prGetTimerslack, 0, 0)
	if errno == 0 {
		_, _, errno = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerslack, 1, 0)
	}
	return func() {
		if errno == 0 {
			_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerslack, old, 0)
		}
		runtime.UnlockOSThread()
	}
}

// sleepFine blocks the thread in nanosleep(2) for d, resuming after signals (the runtime's
// preemption signals interrupt it).
func sleepFine(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	var rem syscall.Timespec
	for syscall.Nanosleep(&ts, &rem) == syscall.EINTR {
		ts = rem
	}
}
