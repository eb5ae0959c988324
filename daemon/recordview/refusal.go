package recordview

import (
	"errors"

	"github.com/paymentsd/paymentsd/storage"
)

// refusalText says why each refusal of a release keeps the record, for
// the operator. The command paymentsd release and the console say it alike.
var refusalText = map[error]string{
	storage.ErrNoRecord:                "there is no live record of the key: never used, or expired; nothing to release",
	storage.ErrReleaseInFlight:         "the key is in flight: its handler may still act; look again once it has completed",
	storage.ErrReleaseSuccess:          "the stored result is a success: its effects stand, and a retry run afresh would do them again",
	storage.ErrReleaseNotTransactional: "the stored error is of a method that is not transactional: its handler may have acted before it failed, so the key keeps its answer until it expires",
	storage.ErrReleaseChanged:          "the record changed since you confirmed: it is not the one you saw; nothing was released; look at the key again",
}

// RefusalText says why err, a refusal of storage.Releaser's Release,
// keeps the record. It returns ok false when err is no refusal.
func RefusalText(err error) (why string, ok bool) {
	for sentinel, why := range refusalText {
		if errors.Is(err, sentinel) {
			return why, true
		}
	}
	return "", false
}
