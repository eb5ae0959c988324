package connlimit

// The HTTP/2 frames and flags the limits follow (RFC 9113, section 6).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	frameWindowUpdate = 0x8
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4

	settingInitialWindowSize = 0x4
)

// frameHeader is an HTTP/2 frame's header.
type frameHeader struct {
	length uint32
	typ    byte
	flags  byte
	stream uint32
}

// frameVisitor is told what a frameReader reads.
type frameVisitor interface {
	// frame is each frame's header, once complete.
	frame(h frameHeader)
	// field is each SETTINGS parameter (6 bytes) and a WINDOW_UPDATE's
	// increment (4 bytes), once complete.
	field(h frameHeader, f []byte)
}

// frameReader follows the frames of one side of an HTTP/2 connection. It
// is fed the bytes in pieces of any size, and keeps of a payload only the
// few bytes the limits read.
type frameReader struct {
	header    [9]byte
	headerLen int // bytes of the current frame header seen
	frame     frameHeader
	left      uint32 // payload bytes of the current frame still to come
	fields    uint32 // of those, the bytes that make up fields
	buf       [6]byte
	bufLen    int
}

func (r *frameReader) scan(b []byte, v frameVisitor) {
	for len(b) > 0 {
		if r.left > 0 {
			n := min(r.left, uint32(len(b)))
			if r.fields > 0 {
				n = min(n, r.fields)
				r.gather(b[:n], v)
			}
			r.left -= n
			b = b[n:]
			continue
		}
		n := copy(r.header[r.headerLen:], b)
		r.headerLen += n
		b = b[n:]
		if r.headerLen < len(r.header) {
			return
		}
		r.headerLen = 0
		h := frameHeader{
			length: uint32(r.header[0])<<16 | uint32(r.header[1])<<8 | uint32(r.header[2]),
			typ:    r.header[3], flags: r.header[4],
			stream: (uint32(r.header[5])<<24 | uint32(r.header[6])<<16 | uint32(r.header[7])<<8 | uint32(r.header[8])) & (1<<31 - 1),
		}
		r.frame, r.left, r.fields, r.bufLen = h, h.length, 0, 0
		switch {
		case h.typ == frameSettings && h.flags&flagAck == 0:
			r.fields = h.length - h.length%6
		case h.typ == frameWindowUpdate && h.length == 4:
			r.fields = 4
		}
		v.frame(h)
	}
}

// gather adds b, bytes of fields, to the field being read, and reports
// each field complete.
func (r *frameReader) gather(b []byte, v frameVisitor) {
	size := 6
	if r.frame.typ == frameWindowUpdate {
		size = 4
	}
	r.fields -= uint32(len(b))
	for len(b) > 0 {
		n := copy(r.buf[r.bufLen:size], b)
		r.bufLen += n
		b = b[n:]
		if r.bufLen == size {
			r.bufLen = 0
			v.field(r.frame, r.buf[:size])
		}
	}
}

// be32 reads a big-endian 32-bit number.
func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
