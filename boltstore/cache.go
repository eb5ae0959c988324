package boltstore

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paymentsd/paymentsd/interceptor/storage"
)

// Bounds of the decoded records kept: how many, and how large one may be.
// Results can be megabytes; those are decoded on each read.
const (
	decodedCap     = 4096
	decodedMaxSize = 16 << 10
)

// decoded keeps completed records as they were last decoded, by key, with
// the encoding they were decoded from. A read that finds the same bytes
// stored reuses the record instead of decoding it again; a retry that comes
// before the record expires does not even read (see unexpired). Entries are
// checked against the stored bytes on every other use, and forgotten when
// their record is replaced or swept, so they are never stale.
type decoded struct {
	m sync.Map // string(key) -> *decodedRecord
	n atomic.Int64
	// forgotten counts the forgets, so that a put of bytes read before its
	// key was forgotten keeps nothing.
	forgotten keyCounts
}

// generation is to be taken before key's record is read, and given to put.
func (d *decoded) generation(key []byte) uint64 { return d.forgotten.of(key) }

type decodedRecord struct {
	raw []byte
	rec *storage.Record
}

// get returns the record decoded from stored, the bytes stored for key now,
// if it is kept, and the kept copy of those bytes. The record is a copy of
// the kept one's fields, so that callers may change them; its Result is
// shared, and is never changed.
func (d *decoded) get(key, stored []byte) (*storage.Record, []byte) {
	v, ok := d.m.Load(string(key))
	if !ok {
		return nil, nil
	}
	e := v.(*decodedRecord)
	if !bytes.Equal(e.raw, stored) {
		return nil, nil
	}
	r := *e.rec
	return &r, e.raw
}

// unexpired returns a copy of the record kept for key if it expires after
// now. Kept records are completed, and a completed record that has not
// expired never changes: only an expired one is swept or claimed anew. So
// it answers a retry as the stored bytes would, without reading them.
func (d *decoded) unexpired(key []byte, now time.Time) *storage.Record {
	v, ok := d.m.Load(string(key))
	if !ok {
		return nil
	}
	e := v.(*decodedRecord)
	if !now.Before(e.rec.Expiry) {
		return nil
	}
	r := *e.rec
	return &r
}

// forget drops what is kept for key, once its stored record has changed,
// and what a read made before now would keep.
func (d *decoded) forget(key []byte) {
	d.forgotten.add(key)
	if _, ok := d.m.LoadAndDelete(string(key)); ok {
		d.n.Add(-1)
	}
}

// put keeps rec, decoded from raw (which the caller no longer changes), as
// read after generation(key) returned gen: unless key was forgotten since,
// for the record read may be gone.
func (d *decoded) put(key, raw []byte, rec *storage.Record, gen uint64) {
	if rec.State != storage.StateCompleted || len(raw) > decodedMaxSize {
		d.forget(key) // claims in flight change, results do not; and what was kept is not stored
		return
	}
	if d.forgotten.of(key) != gen {
		return
	}
	kept := *rec
	e := &decodedRecord{raw: raw, rec: &kept}
	_, loaded := d.m.Swap(string(key), e)
	if !loaded {
		d.n.Add(1)
	}
	if d.forgotten.of(key) != gen { // forgotten while being kept
		if d.m.CompareAndDelete(string(key), e) {
			d.n.Add(-1)
		}
		return
	}
	if loaded || d.n.Load() <= decodedCap {
		return
	}
	// Full: forget an arbitrary entry or so.
	d.m.Range(func(k, _ any) bool {
		if _, ok := d.m.LoadAndDelete(k); ok {
			d.n.Add(-1)
		}
		return d.n.Load() > decodedCap
	})
}
