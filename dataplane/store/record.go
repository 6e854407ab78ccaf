package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"time"
)

// A record is one object (or a tombstone, or a marker) in a segment. It
// starts on a 512-byte boundary and takes a whole number of 512-byte units:
//
//	prefix (48 bytes):
//	  magic "SHR3" | kind u8 | flags u8 | reserved u16
//	  segment seq u64   the seq of the segment header it was written under
//	  units u32         the record's length in 512-byte units, padding included
//	  meta length u32
//	  stored size u64   body bytes
//	  identity length u64
//	  body CRC-32C u32
//	  prefix CRC-32C u32 (over the 44 bytes before it and the meta)
//	meta: key, status, received, initial age, lifetime, coding, header, URL
//	body
//
// Integers are little-endian; meta fields are varints and length-prefixed
// strings. The prefix checksum covers the metadata, the body checksum the
// body: a record cut short by a crash, overwritten in part, or with a
// flipped bit fails one of them and is never served. The segment seq tells
// a record of this lap of the segment from a stale one of an earlier lap
// that follows the last record written.
const (
	recordMagic = "SHR3"
	prefixLen   = 48
	unit        = 512
	// maxMetaLen bounds a record's metadata; more means a corrupt record.
	maxMetaLen = 1 << 20
)

// Record kinds.
const (
	kindObject    = 1 // an object: metadata and body
	kindTombstone = 2 // key (hash) deleted: meta holds the key hash
	kindMarker    = 3 // an extent's object committed: meta holds hash and place
)

// Record flags.
const (
	// flagExtent marks an object written in place into space reserved when
	// its fill began: a replay skips it, and indexes it at its marker.
	flagExtent = 1
	// flagPending marks an extent whose fill has not committed.
	flagPending = 2
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Reasons a record is discarded, as metric labels.
const (
	badFormat   = "format"
	badVersion  = "version"
	badLength   = "length"
	badChecksum = "checksum"
	badKey      = "key"
)

// recordError says why a record cannot be used.
type recordError struct {
	reason string
	detail string
}

func (e *recordError) Error() string { return e.reason + ": " + e.detail }

func badRecord(reason, format string, args ...any) error {
	return &recordError{reason: reason, detail: fmt.Sprintf(format, args...)}
}

// reasonOf is the metric label of err.
func reasonOf(err error) string {
	var re *recordError
	if errors.As(err, &re) {
		return re.reason
	}
	return "io"
}

// prefix is a record's fixed part.
type prefix struct {
	kind, flags  uint8
	seq          uint64
	units        uint32
	metaLen      uint32
	size, length int64
	bodyCRC      uint32
}

// units is the number of 512-byte units n bytes take.
func units(n int64) int64 { return (n + unit - 1) / unit }

// encodeMeta returns the metadata of e as a record holds it.
func encodeMeta(e *Entry) []byte {
	b := make([]byte, 0, 256)
	b = appendString(b, e.Key)
	b = binary.AppendUvarint(b, uint64(e.Status))
	b = binary.AppendVarint(b, e.Received.UnixNano())
	b = binary.AppendVarint(b, int64(e.InitialAge))
	b = binary.AppendVarint(b, int64(e.Lifetime))
	b = appendString(b, e.Coding)
	b = binary.AppendUvarint(b, uint64(len(e.Header)))
	for k, vs := range e.Header {
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return appendString(b, e.URL)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// putPrefix writes p into b[:prefixLen], with the checksum over it and
// meta.
func putPrefix(b []byte, p prefix, meta []byte) {
	copy(b, recordMagic)
	b[4], b[5], b[6], b[7] = p.kind, p.flags, 0, 0
	binary.LittleEndian.PutUint64(b[8:], p.seq)
	binary.LittleEndian.PutUint32(b[16:], p.units)
	binary.LittleEndian.PutUint32(b[20:], uint32(len(meta)))
	binary.LittleEndian.PutUint64(b[24:], uint64(p.size))
	binary.LittleEndian.PutUint64(b[32:], uint64(p.length))
	binary.LittleEndian.PutUint32(b[40:], p.bodyCRC)
	c := crc32.Update(crc32.Checksum(b[:44], crcTable), crcTable, meta)
	binary.LittleEndian.PutUint32(b[44:], c)
}

// stamp sets the segment seq of a record built before its segment was
// known, and its checksum again.
func stamp(b []byte, seq uint64) {
	binary.LittleEndian.PutUint64(b[8:], seq)
	meta := b[prefixLen : prefixLen+int(binary.LittleEndian.Uint32(b[20:]))]
	c := crc32.Update(crc32.Checksum(b[:44], crcTable), crcTable, meta)
	binary.LittleEndian.PutUint32(b[44:], c)
}

// parsePrefix reads a prefix without checking its checksum, which needs
// the metadata (checkPrefix).
func parsePrefix(b []byte) (prefix, error) {
	if len(b) < prefixLen || string(b[:4]) != recordMagic {
		return prefix{}, badRecord(badFormat, "no record magic")
	}
	p := prefix{
		kind:    b[4],
		flags:   b[5],
		seq:     binary.LittleEndian.Uint64(b[8:]),
		units:   binary.LittleEndian.Uint32(b[16:]),
		metaLen: binary.LittleEndian.Uint32(b[20:]),
		size:    int64(binary.LittleEndian.Uint64(b[24:])),
		length:  int64(binary.LittleEndian.Uint64(b[32:])),
		bodyCRC: binary.LittleEndian.Uint32(b[40:]),
	}
	if p.kind < kindObject || p.kind > kindMarker {
		return prefix{}, badRecord(badVersion, "record kind %d, this build reads 1 to 3", p.kind)
	}
	if p.metaLen > maxMetaLen || p.size < 0 || p.length < 0 ||
		int64(p.units)*unit < prefixLen+int64(p.metaLen)+p.size {
		return prefix{}, badRecord(badLength, "a record of %d units does not hold %d bytes of metadata and %d of body", p.units, p.metaLen, p.size)
	}
	return p, nil
}

// checkPrefix checks the prefix checksum of b[:prefixLen] over meta.
func checkPrefix(b, meta []byte) error {
	c := crc32.Update(crc32.Checksum(b[:44], crcTable), crcTable, meta)
	if want := binary.LittleEndian.Uint32(b[44:]); c != want {
		return badRecord(badChecksum, "record checksum %08x, want %08x", c, want)
	}
	return nil
}

// decodeMeta parses metadata as encodeMeta wrote it.
func decodeMeta(b []byte) (*Entry, error) {
	d := decoder{b: b}
	e := &Entry{Key: d.string(), Length: -1}
	e.Status = int(d.uvarint())
	e.Received = time.Unix(0, d.varint())
	e.InitialAge = time.Duration(d.varint())
	e.Lifetime = time.Duration(d.varint())
	e.Coding = d.string()
	nh := d.uvarint()
	if nh > uint64(len(d.b)) {
		return nil, badRecord(badFormat, "%d header fields in %d bytes", nh, len(d.b))
	}
	e.Header = make(http.Header, nh)
	for range nh {
		k := d.string()
		nv := d.uvarint()
		if nv > uint64(len(d.b))+1 {
			d.err = true
			break
		}
		vs := make([]string, nv)
		for i := range vs {
			vs[i] = d.string()
		}
		e.Header[k] = vs
	}
	e.URL = d.string()
	if d.err || len(d.b) != 0 {
		return nil, badRecord(badFormat, "metadata does not parse")
	}
	return e, nil
}

// decoder reads varints and strings, noting the first error.
type decoder struct {
	b   []byte
	err bool
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	d.advance(n)
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	d.advance(n)
	return v
}

// advance skips n bytes; n <= 0 is a varint that did not parse.
func (d *decoder) advance(n int) {
	if n <= 0 {
		d.err, d.b = true, nil
		return
	}
	d.b = d.b[n:]
}

func (d *decoder) string() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.err = true
		d.b = nil
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// objectRecord builds a whole object record (prefix, meta, body, padding)
// for the segment of seq.
func objectRecord(seq uint64, meta, body []byte, length int64) []byte {
	r := objRec{meta: meta, body: body, length: length, crc: crc32.Checksum(body, crcTable)}
	b := make([]byte, r.size())
	r.put(b, seq)
	return b
}

// objRec is an object record to be written: put lays it out in place (in
// a write buffer) once its segment's seq is known.
type objRec struct {
	meta, body []byte
	length     int64
	crc        uint32 // of body
}

func (r objRec) size() int64 { return units(prefixLen+int64(len(r.meta))+int64(len(r.body))) * unit }

func (r objRec) put(b []byte, seq uint64) {
	copy(b[prefixLen:], r.meta)
	copy(b[prefixLen+len(r.meta):], r.body)
	putPrefix(b, prefix{kind: kindObject, seq: seq, units: uint32(len(b) / unit), size: int64(len(r.body)), length: r.length,
		bodyCRC: r.crc}, r.meta)
}

// smallRecord builds a tombstone or marker record: its meta is the key
// hash and, for a marker, the extent's offset, units and segment seq.
func smallRecord(kind uint8, seq, hash uint64, ext *extentRef) []byte {
	meta := binary.LittleEndian.AppendUint64(nil, hash)
	if ext != nil {
		meta = binary.LittleEndian.AppendUint64(meta, uint64(ext.off))
		meta = binary.LittleEndian.AppendUint32(meta, ext.units)
		meta = binary.LittleEndian.AppendUint64(meta, ext.seq)
	}
	b := make([]byte, unit)
	copy(b[prefixLen:], meta)
	putPrefix(b, prefix{kind: kind, seq: seq, units: 1}, meta)
	return b
}

// extentRef is where an extent's object lies, as its marker says.
type extentRef struct {
	off   int64 // byte offset of the record in the data file
	units uint32
	seq   uint64 // the seq of the extent's segment
}

// parseSmall reads the meta of a tombstone or marker.
func parseSmall(kind uint8, meta []byte) (hash uint64, ext extentRef, err error) {
	want := 8
	if kind == kindMarker {
		want = 28
	}
	if len(meta) != want {
		return 0, ext, badRecord(badFormat, "a kind %d record with %d bytes of metadata", kind, len(meta))
	}
	hash = binary.LittleEndian.Uint64(meta)
	if kind == kindMarker {
		ext = extentRef{off: int64(binary.LittleEndian.Uint64(meta[8:])), units: binary.LittleEndian.Uint32(meta[16:]),
			seq: binary.LittleEndian.Uint64(meta[20:])}
	}
	return hash, ext, nil
}
