package once

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/paymentsd/paymentsd/storage"
)

// NewFingerprint computes the fingerprint of req sent to fullMethod, under
// storage.FingerprintScheme with no excluded fields.
func NewFingerprint(fullMethod string, req proto.Message) (storage.Fingerprint, error) {
	return fingerprinter{}.fingerprint(fullMethod, req)
}

// fingerprinter computes fingerprints, leaving out excluded fields.
type fingerprinter struct {
	exclude map[protoreflect.FullName]bool
}

func newFingerprinter(exclude []protoreflect.FullName) fingerprinter {
	f := fingerprinter{}
	for _, name := range exclude {
		if f.exclude == nil {
			f.exclude = map[protoreflect.FullName]bool{}
		}
		f.exclude[name] = true
	}
	return f
}

// scheme is FingerprintScheme, plus the excluded fields if any. Records
// made under other exclusions are thus known to be incomparable.
func (f fingerprinter) scheme() string {
	if len(f.exclude) == 0 {
		return storage.FingerprintScheme
	}
	names := make([]string, 0, len(f.exclude))
	for name := range f.exclude {
		names = append(names, string(name))
	}
	slices.Sort(names)
	return storage.FingerprintScheme + "; excluding " + strings.Join(names, ",")
}

func (f fingerprinter) fingerprint(fullMethod string, req proto.Message) (storage.Fingerprint, error) {
	if len(f.exclude) > 0 {
		req = proto.Clone(req)
		f.clear(req.ProtoReflect())
	}
	opts := proto.MarshalOptions{Deterministic: true}
	b := make([]byte, 0, len(fullMethod)+1+opts.Size(req))
	b = append(append(b, fullMethod...), 0)
	opts.UseCachedSize = true // sized just above: do not size it all again
	b, err := opts.MarshalAppend(b, req)
	if err != nil {
		return storage.Fingerprint{}, fmt.Errorf("fingerprint: %w", err)
	}
	return sha256.Sum256(b), nil
}

// clear removes the excluded fields from m and the messages within it.
func (f fingerprinter) clear(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case f.exclude[fd.FullName()]:
			m.Clear(fd)
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, v protoreflect.Value) bool {
				f.clear(v.Message())
				return true
			})
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				f.clear(v.List().Get(i).Message())
			}
		case fd.Message() != nil && !fd.IsList() && !fd.IsMap():
			f.clear(v.Message())
		}
		return true
	})
}
