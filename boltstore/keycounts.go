package boltstore

import (
	"hash/maphash"
	"sync/atomic"
)

// keyCounts counts events by key in 256 slots that keys hash to: enough to
// tell that nothing happened to a key since its count was read, at the
// price of a false alarm now and then from another key of its slot.
type keyCounts [256]atomic.Uint64

// keyCountSeed hashes keys to their slot.
var keyCountSeed = maphash.MakeSeed()

func (c *keyCounts) slot(key []byte) *atomic.Uint64 {
	return &c[maphash.Bytes(keyCountSeed, key)%uint64(len(c))]
}

// of is the count of key's slot.
func (c *keyCounts) of(key []byte) uint64 { return c.slot(key).Load() }

// add counts one event of key.
func (c *keyCounts) add(key []byte) { c.slot(key).Add(1) }
