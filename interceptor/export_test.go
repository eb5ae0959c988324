package interceptor

import "time"

// SetWatchedPollEvery sets how often a waiter on a Watcher polls, until
// the returned func restores it.
func SetWatchedPollEvery(d time.Duration) (restore func()) {
	old := watchedPollEvery
	watchedPollEvery = d
	return func() { watchedPollEvery = old }
}
