package boltstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/paymentsd/paymentsd/internal/safefile"
	"github.com/paymentsd/paymentsd/internal/sealed"
	"github.com/paymentsd/paymentsd/storage"
)

// ErrDamaged is returned when the data file is damaged. Open returns it
// for a file it cannot fully trust, and refuses that file. Any call that
// meets a damaged page while serving returns it too. Health reports it from
// then on.
var ErrDamaged = errors.New("data file is damaged")

// damaged is an ErrDamaged with its cause. A damaged file (latch) takes no
// more writes. A damaged record fails only the calls about it. It is a
// storage.ErrDamaged too, the store contract's word for it. So the
// interceptor answers DATA_LOSS.
type damaged struct {
	cause error
	latch bool
}

func (e *damaged) Error() string { return ErrDamaged.Error() + ": " + e.cause.Error() }
func (e *damaged) Unwrap() []error {
	return []error{ErrDamaged, storage.ErrDamaged, e.cause}
}

// asDamaged turns what bbolt panicked with into an ErrDamaged. It is for a
// panic on a page that is not what it should be.
func asDamaged(panicked any) error {
	return &damaged{cause: fmt.Errorf("bbolt: %v", panicked), latch: true}
}

// recovered is the error for what a function called by bbolt, or bbolt
// itself, panicked with. Call it from the deferred function that recovered
// p. A panic raised in bbolt's code means a damaged file. Such a panic is
// an assertion, an index out of range, or a fault reading a page of
// garbage. Any other panic is the caller's bug. So are bbolt's own
// complaints of misuse: a nil *Bucket of a bucket that does not exist, or
// Commit inside Update.
func recovered(p any) error {
	msg := fmt.Sprint(p)
	misuse := strings.Contains(msg, "nil pointer dereference") || strings.Contains(msg, "managed tx")
	if !misuse && panickedIn("go.etcd.io/bbolt.", "go.etcd.io/bbolt/") {
		return asDamaged(p)
	}
	return fmt.Errorf("boltstore: panic: %v", p)
}

// guardFaults makes a memory fault of the calling goroutine a panic that
// can be recovered, instead of a crash. Such a fault is bbolt reading
// through a page id of garbage past its mapping. Use: defer guardFaults()().
func guardFaults() (restore func()) {
	old := debug.SetPanicOnFault(true)
	return func() { debug.SetPanicOnFault(old) }
}

// recordError is the error for the stored record of key that does not
// decode. It is an ErrDamaged for the calls about that record. Key bytes
// are the caller's principal and idempotency key, which never reach a log.
// So the record is named by a hash of them.
func recordError(key []byte, err error) error {
	return DamagedValue(fmt.Errorf("record %s: %w", sealed.KeyHash(key), err))
}

// DamagedValue is the error for one stored value found damaged. Its
// checksum does not match, or it does not decode. The error is an
// ErrDamaged for the calls about that value alone. The store serves on.
func DamagedValue(cause error) error { return &damaged{cause: cause} }

// panickedIn reports whether the goroutine's panic in progress was raised
// by a function whose name starts with one of prefixes. It looks at the
// frames below runtime.gopanic. It skips the runtime's own, such as a
// fault's sigpanic.
func panickedIn(prefixes ...string) bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(1, pcs)])
	below := false
	for {
		f, more := frames.Next()
		switch {
		case f.Function == "runtime.gopanic":
			below = true
		case below && !strings.HasPrefix(f.Function, "runtime."):
			for _, p := range prefixes {
				if strings.HasPrefix(f.Function, p) {
					return true
				}
			}
			return false
		}
		if !more {
			return false
		}
	}
}

// The layout of a bbolt meta page is in go.etcd.io/bbolt/internal/common.
// It starts with a 16-byte page header. Then come magic, version, page size
// and flags, of 4 bytes each. Then come root bucket page and sequence,
// freelist page, high-water page and transaction id, of 8 bytes each. Last
// is an FNV-64a checksum of what precedes it. Integers are in the machine's
// order, little-endian on the platforms this runs on.
const (
	metaMagic      = 0xED0CDAED
	metaVersion    = 2
	pageHeaderSize = 16
	metaSize       = 64
	metaSumOffset  = 56
	noFreelist     = ^uint64(0) // of a file whose freelist is not synced
)

type meta struct {
	pageSize              uint32
	root, freelist, pages uint64
	txid                  uint64
}

// checkFileSize refuses a file that is shorter than its meta page says.
// Otherwise bbolt would map pages past its end. It would die of SIGBUS on
// the first read of one. An empty file was emptied, since Open creates
// files whole.
func checkFileSize(path string) error {
	// Opened without waiting. A FIFO named as the data file is refused
	// here, instead of blocking the open until a writer comes.
	f, err := safefile.Open(path)
	var irregular *safefile.NotRegularError
	if errors.As(err, &irregular) {
		return fmt.Errorf("it is %s, not a data file", irregular.Kind())
	}
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	switch {
	case info.IsDir():
		return errors.New("it is a directory, not a data file")
	case !info.Mode().IsRegular():
		return errors.New("it is not a regular file, so not a data file")
	}
	if info.Size() == 0 {
		return &damaged{cause: errors.New("the file is empty, though a data file is created whole: it was emptied")}
	}
	m0, err0 := readMeta(f, 0)
	var m1 meta
	err1 := errors.New("no second meta page")
	if err0 == nil {
		m1, err1 = readMeta(f, int64(m0.pageSize))
	} else {
		// The first page is damaged: look for the second at the usual sizes.
		for size := int64(1024); size <= 16<<20; size *= 2 { // as bbolt looks
			if m1, err1 = readMeta(f, size); err1 == nil {
				break
			}
		}
	}
	var m meta
	switch {
	case err0 != nil && err1 != nil:
		return &damaged{cause: fmt.Errorf("both meta pages are invalid (%v; %v)", err0, err1)}
	case err0 != nil || (err1 == nil && m1.txid > m0.txid):
		m = m1
	default:
		m = m0
	}
	want := int64(m.pages) * int64(m.pageSize)
	if info.Size() < want {
		return &damaged{cause: fmt.Errorf("the file is %d bytes but its meta page says %d pages of %d bytes (%d bytes): it was truncated",
			info.Size(), m.pages, m.pageSize, want)}
	}
	if m.root >= m.pages || (m.freelist >= m.pages && m.freelist != noFreelist) {
		return &damaged{cause: fmt.Errorf("the meta page names page %d or %d, past the file's %d pages", m.root, m.freelist, m.pages)}
	}
	return nil
}

// readMeta reads and validates the meta page at off.
func readMeta(f *os.File, off int64) (meta, error) {
	b := make([]byte, pageHeaderSize+metaSize)
	if _, err := f.ReadAt(b, off); err != nil {
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("meta page at %d is past the end of the file", off)
		}
		return meta{}, err
	}
	b = b[pageHeaderSize:]
	le := binary.LittleEndian
	h := fnv.New64a()
	h.Write(b[:metaSumOffset])
	switch {
	case le.Uint32(b[0:]) != metaMagic:
		return meta{}, fmt.Errorf("meta page at %d: not a bbolt meta page", off)
	case le.Uint32(b[4:]) != metaVersion:
		return meta{}, fmt.Errorf("meta page at %d: version %d", off, le.Uint32(b[4:]))
	case le.Uint64(b[metaSumOffset:]) != h.Sum64():
		return meta{}, fmt.Errorf("meta page at %d: checksum mismatch", off)
	}
	return meta{
		pageSize: le.Uint32(b[8:]),
		root:     le.Uint64(b[16:]),
		freelist: le.Uint64(b[32:]),
		pages:    le.Uint64(b[40:]),
		txid:     le.Uint64(b[48:]),
	}, nil
}
