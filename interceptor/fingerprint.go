package interceptor

import (
	"google.golang.org/protobuf/proto"

	"github.com/paymentsd/paymentsd/interceptor/storage"
	"github.com/paymentsd/paymentsd/once"
)

// FingerprintScheme names how fingerprints are computed. Records keep the
// scheme of their fingerprint. A fingerprint computed another way cannot
// be compared with it. A request that meets a record of another scheme is
// thus a mismatch, never a replay.
const FingerprintScheme = once.FingerprintScheme

// NewFingerprint computes the fingerprint of req sent to fullMethod, under
// FingerprintScheme with no excluded fields.
func NewFingerprint(fullMethod string, req proto.Message) (storage.Fingerprint, error) {
	return once.NewFingerprint(fullMethod, req)
}
