package boltstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/paymentsd/paymentsd/internal/sealed"
	"github.com/paymentsd/paymentsd/storage"
)

// recordKey is the file's key of rk's record: its scope and its key, the
// scope first, so that a scope's records are one range.
func recordKey(rk storage.RecordKey) []byte {
	return joinParts([]byte(rk.Scope), []byte(rk.Key))
}

// encodeRecord is the stored form of r, the record of key. That is its
// compact encoding, sealed with its checksum and key's.
func encodeRecord(key []byte, r *storage.Record) ([]byte, error) {
	b, err := marshalRecord(r)
	if err != nil {
		return nil, err
	}
	return sealed.Seal(key, b), nil
}

// decodeRecord decodes v, the stored form of key's record. A value whose
// checksum does not match was damaged on disk. It is an ErrDamaged for the
// calls about that record, never for another record.
func decodeRecord(key, v []byte) (*storage.Record, error) {
	b, err := sealed.Open(key, v)
	if err != nil {
		return nil, recordError(key, err)
	}
	return unmarshalRecord(key, b)
}

// unmarshalRecord decodes the record of key from b, the payload of its
// stored form. That is the compact encoding or, written by an earlier
// build, the protobuf one.
func unmarshalRecord(key, b []byte) (*storage.Record, error) {
	if len(b) > 0 && b[0] == compactMark {
		r, err := unmarshalCompact(b)
		if err != nil {
			return nil, recordError(key, err)
		}
		return r, nil
	}
	r := new(storage.Record)
	if err := r.UnmarshalBinary(b); err != nil { // copies what it keeps
		return nil, recordError(key, err)
	}
	return r, nil
}

// joinParts joins parts, each but the last prefixed with its length. So no
// part can run into the next. As a bucket key, a prefix of whole parts
// selects a range. As a value, it puts an owner before an encoding.
func joinParts(parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += binary.MaxVarintLen64 + len(p)
	}
	k := make([]byte, 0, n)
	for i, p := range parts {
		if i < len(parts)-1 {
			k = binary.AppendUvarint(k, uint64(len(p)))
		}
		k = append(k, p...)
	}
	return k
}

// The compact encoding of a record, the payload of its sealed value. A
// record is stored once per create, so every byte of it counts many
// times over. The encoding keeps nothing that its key or its state
// already says:
//
//	mark        1 byte, compactMark
//	flags       1 byte, the flag bits below
//	attempt     uvarint
//	fingerprint 32 bytes
//	token       16 bytes
//	scheme      uvarint length and bytes, unless flagKnownScheme
//	owner       uvarint length and bytes
//	claim time  8 bytes, big-endian Unix nanoseconds, if flagClaimTime
//	expiry      varint nanoseconds after the claim time (or the epoch)
//	lease       varint nanoseconds likewise, if flagLease
//	result      the rest, completed only: storage.Result's encoding
//
// Records of earlier builds are protobuf idempotency.v1.Records, which
// unmarshalRecord still reads. None starts with compactMark: that byte
// would be a tag of wire type 7, which protobuf does not have.
const compactMark = 0x07

const (
	flagCompleted     = 1 << iota
	flagTransactional // Durability is Transactional
	flagClaimTime     // ClaimTime is set
	flagLease         // LeaseExpiry is set
	flagKnownScheme   // Scheme is storage.FingerprintScheme
	flagShortType     // the response's type URL had typeURLPrefix, not stored
)

// typeURLPrefix begins nearly every type URL. It is left out when stored.
const typeURLPrefix = "type.googleapis.com/"

// marshalRecord is the compact encoding of r.
func marshalRecord(r *storage.Record) ([]byte, error) {
	if err := encodable(r); err != nil {
		return nil, fmt.Errorf("encode idempotency record: %w", err)
	}
	flags := recordFlags(r)
	result := r.Result
	if result != nil && result.Response != nil && strings.HasPrefix(result.Response.TypeUrl, typeURLPrefix) {
		flags |= flagShortType
		short := *result
		short.Response = &anypb.Any{TypeUrl: strings.TrimPrefix(result.Response.TypeUrl, typeURLPrefix), Value: result.Response.Value}
		result = &short
	}

	b := make([]byte, 0, 128)
	b = append(b, compactMark, flags)
	b = binary.AppendUvarint(b, r.Attempt)
	b = append(b, r.Fingerprint[:]...)
	b = append(b, r.Token[:]...)
	if flags&flagKnownScheme == 0 {
		b = appendString(b, r.Scheme)
	}
	b = appendString(b, r.Owner)
	var since int64 // times are stored after the claim time, which is near them
	if flags&flagClaimTime != 0 {
		since = r.ClaimTime.UnixNano()
		b = binary.BigEndian.AppendUint64(b, uint64(since))
	}
	b = binary.AppendVarint(b, r.Expiry.UnixNano()-since)
	if flags&flagLease != 0 {
		b = binary.AppendVarint(b, r.LeaseExpiry.UnixNano()-since)
	}
	if result == nil {
		return b, nil
	}
	res, err := result.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return append(b, res...), nil
}

// encodable says why r cannot be encoded, or returns nil.
func encodable(r *storage.Record) error {
	if r.State != storage.StateInFlight && r.State != storage.StateCompleted {
		return fmt.Errorf("unknown state %d", r.State)
	}
	if (r.State == storage.StateCompleted) != (r.Result != nil) {
		return fmt.Errorf("state %d with result %t", r.State, r.Result != nil)
	}
	for _, t := range []time.Time{r.ClaimTime, r.LeaseExpiry} {
		if !t.IsZero() && !inNanos(t) {
			return fmt.Errorf("time %v is out of the encoding's range", t)
		}
	}
	if !inNanos(r.Expiry) {
		return fmt.Errorf("expiry %v is out of the encoding's range", r.Expiry)
	}
	return nil
}

// recordFlags are the flags of r's encoding, but flagShortType, which
// marshalRecord sets as it shortens the type URL.
func recordFlags(r *storage.Record) byte {
	var flags byte
	if r.State == storage.StateCompleted {
		flags |= flagCompleted
	}
	if r.Durability == storage.Transactional {
		flags |= flagTransactional
	}
	if !r.ClaimTime.IsZero() {
		flags |= flagClaimTime
	}
	if !r.LeaseExpiry.IsZero() {
		flags |= flagLease
	}
	if r.Scheme == storage.FingerprintScheme {
		flags |= flagKnownScheme
	}
	return flags
}

// inNanos reports whether t is nanoseconds since 1970 in an int64, as the
// encoding keeps it: from 1678 to 2262. Time.UnixNano is undefined beyond.
func inNanos(t time.Time) bool {
	return !t.Before(time.Unix(0, math.MinInt64)) && !t.After(time.Unix(0, math.MaxInt64))
}

// errCompact is a compact record cut short or otherwise malformed.
var errCompact = errors.New("decode idempotency record: malformed compact record")

// unmarshalCompact decodes b, a record that marshalRecord encoded.
func unmarshalCompact(b []byte) (*storage.Record, error) {
	if len(b) < 2 || b[0] != compactMark {
		return nil, errCompact
	}
	flags := b[1]
	if flags&^(flagShortType<<1-1) != 0 {
		return nil, errCompact // a flag of a later format: refused, not misread
	}
	d := decoder{b: b[2:]}
	r := &storage.Record{State: storage.StateInFlight, Durability: storage.Durable, Scheme: storage.FingerprintScheme}
	if flags&flagCompleted != 0 {
		r.State = storage.StateCompleted
	}
	if flags&flagTransactional != 0 {
		r.Durability = storage.Transactional
	}
	r.Attempt = d.uvarint()
	copy(r.Fingerprint[:], d.bytes(len(r.Fingerprint)))
	copy(r.Token[:], d.bytes(len(r.Token)))
	if flags&flagKnownScheme == 0 {
		r.Scheme = d.string()
	}
	r.Owner = d.string()
	var since int64
	if flags&flagClaimTime != 0 {
		since = int64(binary.BigEndian.Uint64(d.bytes(8)))
		r.ClaimTime = time.Unix(0, since)
	}
	r.Expiry = time.Unix(0, since+d.varint())
	if flags&flagLease != 0 {
		r.LeaseExpiry = time.Unix(0, since+d.varint())
	}
	if d.err != nil {
		return nil, errCompact
	}
	if r.State == storage.StateInFlight {
		if len(d.b) > 0 {
			return nil, fmt.Errorf("%w: a claim in flight with a result", errCompact)
		}
		return r, nil
	}
	r.Result = new(storage.Result)
	if err := r.Result.UnmarshalBinary(d.b); err != nil { // copies what it keeps
		return nil, fmt.Errorf("decode idempotency record: %w", err)
	}
	if flags&flagShortType != 0 {
		if r.Result.Response == nil {
			return nil, fmt.Errorf("%w: a short type URL with no response", errCompact)
		}
		r.Result.Response.TypeUrl = typeURLPrefix + r.Result.Response.TypeUrl
	}
	return r, nil
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// decoder reads a compact record. Its first failure sticks; what it
// returns after it is zero.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil || n > len(d.b) {
		d.err = errCompact
		return make([]byte, n)
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if d.err != nil || n <= 0 {
		d.err = errCompact
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if d.err != nil || n <= 0 {
		d.err = errCompact
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.err = errCompact
		return ""
	}
	return string(d.bytes(int(n)))
}
