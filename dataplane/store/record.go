package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"time"
)

// A record file holds one object:
//
//	magic "SHCR" | version u16 | flags u16 | meta length u32
//	meta: key, status, received, initial age, lifetime, coding, header, URL
//	meta CRC-32C u32 (over everything before it)
//	body
//	footer: stored size u64 | identity length u64 | body CRC-32C u32 | "SHCE"
//
// Integers are little-endian; meta fields are varints and length-prefixed
// strings. The footer is written last, so a record cut short by a crash
// has no valid footer, and a file whose size disagrees with its header and
// footer is discarded. Version 1 records, which have no URL, are still
// read.
const (
	recordMagic   = "SHCR"
	footerMagic   = "SHCE"
	recordVersion = 2
	prefixLen     = 12
	footerLen     = 24
	// maxMetaLen bounds a record's metadata; more means a corrupt file.
	maxMetaLen = 1 << 20
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

// recordError says why a record file cannot be used.
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

// encodeHead returns the record's prefix, metadata and metadata checksum.
func encodeHead(e *Entry) []byte {
	b := make([]byte, prefixLen, 512)
	copy(b, recordMagic)
	binary.LittleEndian.PutUint16(b[4:], recordVersion)
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
	b = appendString(b, e.URL)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(b)-prefixLen))
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// headLen reads the prefix and returns the length of the whole head
// (prefix, metadata and its checksum), which is the body's offset.
func headLen(prefix []byte) (int, error) {
	if len(prefix) < prefixLen || string(prefix[:4]) != recordMagic {
		return 0, badRecord(badFormat, "no record magic")
	}
	if v := binary.LittleEndian.Uint16(prefix[4:]); v != recordVersion && v != 1 {
		return 0, badRecord(badVersion, "format version %d, this build reads %d", v, recordVersion)
	}
	n := binary.LittleEndian.Uint32(prefix[8:])
	if n > maxMetaLen {
		return 0, badRecord(badFormat, "metadata of %d bytes", n)
	}
	return prefixLen + int(n) + 4, nil
}

// decodeHead parses a whole head as returned by encodeHead.
func decodeHead(b []byte) (*Entry, error) {
	n, err := headLen(b)
	if err != nil {
		return nil, err
	}
	if len(b) != n {
		return nil, badRecord(badLength, "head of %d bytes, want %d", len(b), n)
	}
	if got, want := crc32.Checksum(b[:n-4], crcTable), binary.LittleEndian.Uint32(b[n-4:]); got != want {
		return nil, badRecord(badChecksum, "metadata checksum %08x, want %08x", got, want)
	}
	d := decoder{b: b[prefixLen : n-4]}
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
	if binary.LittleEndian.Uint16(b[4:]) >= 2 {
		e.URL = d.string()
	}
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

// footer is the record's last bytes.
type footer struct {
	size, length int64
	crc          uint32
}

func (f footer) encode() []byte {
	b := make([]byte, 0, footerLen)
	b = binary.LittleEndian.AppendUint64(b, uint64(f.size))
	b = binary.LittleEndian.AppendUint64(b, uint64(f.length))
	b = binary.LittleEndian.AppendUint32(b, f.crc)
	return append(b, footerMagic...)
}

// decodeFooter parses the footer of a record of fileSize bytes whose body
// starts at bodyOff, and checks that the sizes agree.
func decodeFooter(b []byte, bodyOff, fileSize int64) (footer, error) {
	if len(b) != footerLen || string(b[20:]) != footerMagic {
		return footer{}, badRecord(badLength, "no footer: the record was cut short")
	}
	f := footer{
		size:   int64(binary.LittleEndian.Uint64(b)),
		length: int64(binary.LittleEndian.Uint64(b[8:])),
		crc:    binary.LittleEndian.Uint32(b[16:]),
	}
	if f.size < 0 || f.length < 0 || bodyOff+f.size+footerLen != fileSize {
		return footer{}, badRecord(badLength, "file of %d bytes does not hold a %d-byte body at offset %d", fileSize, f.size, bodyOff)
	}
	return f, nil
}
